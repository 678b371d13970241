"""The engine's records: one request, one fair queue, one flow schema's counters.

They refer to each other (a request knows its queue, a queue holds its requests), so they live
together, below the queue set and the controller that move them: nothing here imports either.
What a request knows of its level, and through it of its queue set, is typed by two protocols
here (:class:`RequestLevel`, :class:`FairQueueSet`), which ``LevelState`` and ``QueueSet``
implement: the records stay below them, and the controller reads a typed level.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, Protocol

from apf_limiter.engine._seat_seconds import (
    ESTIMATED_SERVICE_NS,
    seats_times_duration,
    to_nanoseconds,
)
from apf_limiter.engine._statistics import FlowSchemaStatistics

if TYPE_CHECKING:
    from apf_limiter._digest import RequestDigest
    from apf_limiter.config._model import FlowSchema
    from apf_limiter.engine._dump import QueueSetCounts, QueueSetDump, WaitingSummary
    from apf_limiter.engine._heavy_hitters import RejectedFlows
    from apf_limiter.engine._integrator import IntegratorResults


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


class RequestEvent(IntEnum):
    """What moves a request from one :class:`RequestState` to the next (see :data:`TRANSITIONS`)."""

    ENQUEUE = 0
    """It joined a queue on arrival."""
    DISPATCH = 1
    """It was given its seats: at once on arrival, or from its queue."""
    REJECT = 2
    """It was turned away on arrival (``queue-full`` or ``concurrency-limit``)."""
    TIME_OUT = 3
    """Its wait limit passed in its queue."""
    CANCEL = 4
    """Its waiter left its queue."""
    LINGER = 5
    """It finished running and holds its final seats for an additional latency."""
    FINISH = 6
    """It finished running (or never ran) and released its seats at once."""
    RELEASE = 7
    """Its additional latency passed: its final seats are released."""


_S = RequestState
_E = RequestEvent

TRANSITIONS: Final[dict[tuple[RequestState, RequestEvent], RequestState]] = {
    (_S.NEW, _E.ENQUEUE): _S.WAITING,
    (_S.NEW, _E.DISPATCH): _S.EXECUTING,
    (_S.NEW, _E.REJECT): _S.REJECTED,
    (_S.WAITING, _E.DISPATCH): _S.EXECUTING,
    (_S.WAITING, _E.TIME_OUT): _S.TIMED_OUT,
    (_S.WAITING, _E.CANCEL): _S.CANCELLED,
    (_S.EXECUTING, _E.LINGER): _S.LINGERING,
    (_S.EXECUTING, _E.FINISH): _S.DONE,
    (_S.LINGERING, _E.RELEASE): _S.DONE,
}
"""Every legal move of a request: (its state, the event) -> its next state.

The one place where a request's states and the events that move them are written down (as h11's
``_state.py`` does for a connection); :func:`transition` is the one place that assigns
``Request.state`` after construction (``tests/engine/test_request_states.py`` checks that no
other module does). ``DONE``, ``REJECTED``, ``TIMED_OUT`` and ``CANCELLED`` are final: no event
leaves them, so a request ends exactly once.
"""


def transition(request: Request, event: RequestEvent) -> None:
    """Move ``request`` to the state that ``event`` leads to from its current one.

    Raises:
        RuntimeError: If :data:`TRANSITIONS` has no move for its state and ``event`` (an
            engine bug, or a caller's; the request is left as it was).
    """
    new = TRANSITIONS.get((request.state, event))
    if new is None:
        raise RuntimeError(f"illegal transition: {event.name} does not apply to {request!r}")
    request.state = new


class FairQueueSet(Protocol):
    """The queue set's interface: all that the level, the controller and the dumps use of it.

    In the spirit of upstream's ``fq.QueueSet`` (``fairqueuing/interface.go``:
    ``BeginConfigChange``, ``IsIdle``, ``StartRequest``, ``UpdateObservations``, ``Dump``).
    ``QueueSet`` implements it; ``tests/engine/test_queueset_interface.py`` checks that no other
    engine module reads a queue set's members beyond these.
    """

    @property
    def concurrency_limit(self) -> int:
        """The current limit, in seats."""
        ...

    @property
    def requests_waiting(self) -> int:
        """Requests in its queues."""
        ...

    @property
    def seat_demand(self) -> int:
        """Seats in use plus seats waiting."""
        ...

    @property
    def is_idle(self) -> bool:
        """Whether no request is waiting or executing."""
        ...

    @property
    def is_exempt(self) -> bool:
        """Whether the level is exempt (never limits, never queues)."""
        ...

    def configure(
        self,
        *,
        desired_num_queues: int,
        queue_length_limit: int,
        hand_size: int,
        concurrency_limit: int,
        now: float,
    ) -> Sequence[Request]:
        """Take a new queuing shape and limit (``BeginConfigChange`` and its completion)."""
        ...

    def set_concurrency_limit(self, concurrency_limit: int, now: float) -> Sequence[Request]:
        """Change the current limit."""
        ...

    def start_request(self, request: Request, now: float) -> Sequence[Request]:
        """Admit, queue or reject an arriving request."""
        ...

    def finish(self, request: Request, now: float, ran: bool = True) -> Sequence[Request]:
        """Record that an executing request's handler returned."""
        ...

    def release(self, request: Request, now: float) -> Sequence[Request]:
        """Release a lingering request's final seats."""
        ...

    def cancel(self, request: Request, now: float, *, timed_out: bool) -> Sequence[Request]:
        """Remove a waiting request from its queue."""
        ...

    def update_observations(self, now: float) -> IntegratorResults:
        """Close the seat-demand interval at ``now``."""
        ...

    def overdue_lingering(self, overdue: float) -> list[Request]:
        """The lingering requests whose final seats were due back by ``overdue``."""
        ...

    def counts(self) -> QueueSetCounts:
        """The counters, frozen."""
        ...

    def waiting_summary(self) -> WaitingSummary:
        """The waiting requests counted by flow schema, flow and verb, frozen."""
        ...

    def dump(self, waiting: bool = True) -> QueueSetDump:
        """Virtual time, queues and requests (``waiting=False``: no waiting one), frozen."""
        ...


class RequestLevel(Protocol):
    """What the controller reads of a request's level (``LevelState`` implements it)."""

    @property
    def name(self) -> str:
        """The level's name."""
        ...

    @property
    def quiescing(self) -> bool:
        """Whether the level left the configuration and is draining."""
        ...

    @property
    def shadow(self) -> bool:
        """Whether the level is in shadow mode."""
        ...

    @property
    def is_drained(self) -> bool:
        """Whether nothing waits and nothing executes at the level."""
        ...

    @property
    def queue_set(self) -> FairQueueSet:
        """The level's queue set."""
        ...

    @property
    def rejected_flows(self) -> RejectedFlows:
        """The level's rejections by flow."""
        ...


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
        release_at: When a lingering request's final seats are due back.
        ended_at: When a waiting request left its queue without running (``TIMED_OUT`` or
            ``CANCELLED``).
        retry_after: The Retry-After of its level right after its drop was recorded (set for
            ``REJECTED``, ``TIMED_OUT`` and ``CANCELLED``).
        digest: The request digest it was classified from.
        level: The owning level's run-time state (a ``LevelState``), set by the controller;
            only the controller reads it.
        counters: The flow schema's counters (set by the controller).
        handle: The one slot for the shell (its waiter); the engine never reads it.
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
        "ended_at",
        "retry_after",
        "digest",
        "level",
        "counters",
        "handle",
    )

    # Declared for type checkers (and, concretely typed, read natively by the compiled build):
    # these slots are filled in as the request goes along.
    arrival_time: float
    arrival_r: int
    reject_reason: str
    queue_length_after_enqueue: int
    release_at: float
    ended_at: float
    retry_after: int
    digest: RequestDigest
    level: RequestLevel
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
        # queue_length_after_enqueue when queued; release_at when lingering; ended_at and
        # retry_after when it ends unrun; digest, level and counters by the controller.
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


class Queue:
    """One fair queue: a FIFO of waiting requests and the requests it has dispatched.

    Attributes:
        index: Position in the queue set (-1 once removed).
        waiting: The waiting requests, oldest first.
        executing: Requests dispatched from this queue that are still running.
        next_dispatch_r: Virtual time at which the next request of this queue may start.
        seats_in_use: Seats held by requests of this queue (lingering ones included).
        initial_seats_sum: Sum of initial seats of the waiting requests.
        max_seats_sum: Sum of max seats of the waiting requests.
        total_work_sum: Sum of total work of the waiting requests.
    """

    __slots__ = (
        "index",
        "waiting",
        "executing",
        "next_dispatch_r",
        "seats_in_use",
        "initial_seats_sum",
        "max_seats_sum",
        "total_work_sum",
        "finish",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.waiting: deque[Request] = deque()
        self.executing: set[Request] = set()
        self.next_dispatch_r = 0
        self.seats_in_use = 0
        self.initial_seats_sum = 0
        self.max_seats_sum = 0
        self.total_work_sum = 0
        # The virtual finish time under which the queue is indexed for dispatch (None: it
        # has no waiting request, so it is not indexed).
        self.finish: int | None = None

    def __repr__(self) -> str:
        return (
            f"<Queue {self.index} waiting={len(self.waiting)} "
            f"executing={len(self.executing)} seats={self.seats_in_use}>"
        )


class FlowSchemaCounters:
    """Mutable counters of one flow schema (the engine's own bookkeeping)."""

    __slots__ = (
        "matched",
        "dispatched",
        "rejected_queue_full",
        "rejected_concurrency_limit",
        "timed_out",
        "cancelled",
        "executing",
        "waiting",
    )

    def __init__(self) -> None:
        self.matched = 0
        self.dispatched = 0
        self.rejected_queue_full = 0
        self.rejected_concurrency_limit = 0
        self.timed_out = 0
        self.cancelled = 0
        self.executing = 0
        self.waiting = 0

    def statistics(self, schema: FlowSchema) -> FlowSchemaStatistics:
        """Return a frozen snapshot of the counters of ``schema``."""
        return FlowSchemaStatistics(
            name=schema.name,
            priority_level=schema.priority_level,
            matching_precedence=schema.matching_precedence,
            matched=self.matched,
            dispatched=self.dispatched,
            rejected={
                "queue-full": self.rejected_queue_full,
                "concurrency-limit": self.rejected_concurrency_limit,
                "time-out": self.timed_out,
            },
            cancelled=self.cancelled,
            executing_requests=self.executing,
            waiting_requests=self.waiting,
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
