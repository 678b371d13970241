"""The engine's record of one request: its flow, work estimate, and where it is in its life."""

from __future__ import annotations

import math
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final

from apf_limiter.engine.seat_seconds import (
    ESTIMATED_SERVICE_NS,
    seats_times_duration,
    to_nanoseconds,
)

if TYPE_CHECKING:
    from apf_limiter.digest import RequestDigest
    from apf_limiter.engine.controller import FlowSchemaCounters, LevelState
    from apf_limiter.engine.queueset import Queue

__all__ = ["RequestState", "Request"]


class RequestState(IntEnum):
    """Where a request is in its life. Each request ends exactly once."""

    NEW = 0
    WAITING = 1
    """In a queue, waiting for seats."""
    EXECUTING = 2
    """Holding its seats and running."""
    LINGERING = 3
    """Finished running; still holding its final seats for the additional latency."""
    DONE = 4
    """Ended after executing; seats released."""
    REJECTED = 5
    """Ended without executing: queue full or concurrency limit."""
    TIMED_OUT = 6
    """Ended without executing: its queue wait limit passed."""
    CANCELLED = 7
    """Ended without executing: its waiter went away while it was queued."""


class Request:
    """One request inside a priority level's queue set.

    The work estimate follows Kubernetes: the request occupies ``max_seats`` (the larger of
    initial and final seats) from dispatch until its additional latency has passed after it
    finished. ``total_work`` is the virtual work charged to its queue.

    Attributes:
        flow_schema: Name of the matched flow schema.
        priority_level: Name of the priority level.
        distinguisher: The flow distinguisher.
        flow_hash: The flow hash used for shuffle sharding.
        initial_seats: Seats while executing.
        final_seats: Seats of the work done after the request finishes (``max_seats`` covers
            them).
        additional_latency_ns: How long ``max_seats`` stay held after the request finishes.
        max_seats: Seats occupied from dispatch to release.
        total_work: Virtual work in seat-second units (initial plus final work).
        arrival_time: When the request arrived (seconds, the shell's clock).
        arrival_r: The queue set's virtual time at arrival.
        start_time: When the request was dispatched.
        queue: The queue it was put in, or ``None`` on the queue-less (exempt/Reject) path.
        state: Where the request is in its life.
        reject_reason: Why it was rejected (set only when ``state`` is ``REJECTED`` or
            ``TIMED_OUT``).
        queue_length_after_enqueue: The queue's length right after this request joined it
            (set only for a request that waited).
        release_at: When a lingering request's final seats are due back; the shell also
            keeps here when a request's wait limit passed (``TIMED_OUT``).
        handle: Free slot for the shell (its waiter); the engine never reads it.
        digest: Free slot for the shell (the request digest); the engine never reads it.
        level: The owning level's run-time state (set by the controller).
        counters: The flow schema's counters (set by the controller).
    """

    __slots__ = (
        "flow_schema",
        "priority_level",
        "distinguisher",
        "flow_hash",
        "initial_seats",
        "final_seats",
        "additional_latency_ns",
        "max_seats",
        "final_work",
        "total_work",
        "arrival_time",
        "arrival_r",
        "start_time",
        "queue",
        "state",
        "reject_reason",
        "queue_length_after_enqueue",
        "release_at",
        "handle",
        "digest",
        "level",
        "counters",
    )

    # Declared for type checkers (and, concretely typed, read natively by the compiled build):
    # these slots are filled in as the request goes along.
    arrival_time: float
    arrival_r: int
    reject_reason: str
    queue_length_after_enqueue: int
    release_at: float
    digest: RequestDigest
    level: LevelState
    counters: FlowSchemaCounters

    def __init__(
        self,
        flow_schema: str,
        priority_level: str,
        distinguisher: str = "",
        flow_hash: int = 0,
        initial_seats: int = 1,
        final_seats: int = 0,
        additional_latency: float = 0.0,
    ) -> None:
        if initial_seats < 1 or final_seats < 0 or additional_latency < 0:
            _reject_estimate(initial_seats, final_seats, additional_latency)
        self.flow_schema = flow_schema
        self.priority_level = priority_level
        self.distinguisher = distinguisher
        self.flow_hash = flow_hash
        self.initial_seats = initial_seats
        self.final_seats = final_seats
        self.max_seats = initial_seats if initial_seats >= final_seats else final_seats
        initial_work = _INITIAL_WORK.get(initial_seats) or _initial_work(initial_seats)
        if additional_latency:
            if not additional_latency < math.inf:  # infinite or NaN
                _reject_estimate(initial_seats, final_seats, additional_latency)
            latency_ns = to_nanoseconds(additional_latency)
            self.additional_latency_ns = latency_ns
            self.final_work = final_work = seats_times_duration(final_seats, latency_ns)
            self.total_work = initial_work + final_work
        else:
            self.additional_latency_ns = 0
            self.final_work = 0
            self.total_work = initial_work
        # Set when they become meaningful, not here (this runs for every request):
        # arrival_time and arrival_r at arrival; reject_reason on rejection;
        # queue_length_after_enqueue when queued; release_at when lingering; digest, level
        # and counters by the controller.
        self.start_time = 0.0
        self.queue: Queue | None = None
        self.state = RequestState.NEW
        self.handle: Any = None

    @property
    def additional_latency(self) -> float:
        """The additional latency in seconds."""
        return self.additional_latency_ns / 1e9

    def __repr__(self) -> str:
        return (
            f"<Request {self.flow_schema}/{self.distinguisher!r} at {self.priority_level} "
            f"{self.state.name.lower()} seats={self.max_seats}>"
        )


_INITIAL_WORK: Final[dict[int, int]] = {}


def _initial_work(seats: int) -> int:
    # Initial work depends only on the seat count; most requests use 1 seat.
    work = seats_times_duration(seats, ESTIMATED_SERVICE_NS)
    if len(_INITIAL_WORK) < 1024:
        _INITIAL_WORK[seats] = work
    return work


def _reject_estimate(initial_seats: int, final_seats: int, additional_latency: float) -> None:
    if initial_seats < 1:
        raise ValueError(f"initial_seats must be at least 1, got {initial_seats}")
    if final_seats < 0:
        raise ValueError(f"final_seats must not be negative, got {final_seats}")
    raise ValueError(
        f"additional_latency must be a finite, non-negative number of seconds, "
        f"got {additional_latency}"
    )
