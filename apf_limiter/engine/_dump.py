"""The engine's frozen read types: what a dump of a request, queue, queue set and level holds.

In the style of Kubernetes' ``QueueSet.Dump()`` (``queueset.go``, with its types in
``apiserver/pkg/util/flowcontrol/debug/dump.go``): the queue set and the level each copy what
the debug dumps, the dashboard and the metrics show into these frozen values
(``QueueSet.dump``, ``LevelState.dump``, ``Controller.dump``), so that none of their readers
reads (or can change) the engine's own objects. This module holds only the types: no engine
logic, and nothing from the engine but the statistics it embeds, so observability may import it.
The public ones are exported from :mod:`apf_limiter` (``Limiter.dump()`` returns an
:class:`EngineDump`).

Virtual times and work stay raw seat-second units (unsigned 64-bit fixed point, see
``_seat_seconds``); times are the shell's clock readings, in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from apf_limiter.engine._statistics import LimiterStatistics, PriorityLevelStatistics

if TYPE_CHECKING:
    from apf_limiter._digest import RequestDigest


READ_ONLY_VERBS: Final = frozenset({"get", "list", "watch", "head", "options"})
"""Verbs counted as ``readOnly`` by ``read_vs_write_current_requests`` (HTTP's safe methods
``head`` and ``options`` included: in Kubernetes a HEAD request is a ``get``)."""


class FlowCount(NamedTuple):
    """A flow's estimated rejections (an entry of :attr:`LevelDump.rejected_flows`).

    Attributes:
        flow_schema: The flow schema the requests matched.
        distinguisher: Their flow distinguisher (``""`` at a level that does not hash flows).
        rejections: Rejections counted: an upper bound of the true count.
        error: How much ``rejections`` may overestimate (``rejections - error`` is a lower
            bound).
    """

    flow_schema: str
    distinguisher: str
    rejections: int
    error: int


class RequestDump(NamedTuple):
    """One waiting, executing or lingering request.

    A named tuple rather than a frozen dataclass, because a dump holds one per request: a frozen
    dataclass sets each field through ``object.__setattr__`` (compiled by mypyc too), a tuple is
    built in one step, about 0.3 µs instead of 1.6 µs for these fifteen fields.

    Attributes:
        flow_schema: Name of the matched flow schema.
        priority_level: Name of the priority level.
        distinguisher: The flow distinguisher (``""`` where the level does not hash flows).
        state: The name of its state: ``WAITING``, ``EXECUTING`` or ``LINGERING``.
        queue_index: Index of its queue, or -1 on the queue-less (exempt and ``Reject``) path
            and for a queue that was removed.
        initial_seats: Seats while executing.
        final_seats: Seats held for the additional latency after it finished.
        max_seats: Seats occupied from dispatch to release.
        additional_latency_ns: How long ``max_seats`` stay held after it finishes.
        total_work: Its virtual work, in seat-second units.
        arrival_time: When it arrived.
        start_time: When it was dispatched (0.0 while waiting).
        release_at: When a lingering request's seats are due back (0.0 for the others).
        verb: The verb of its digest (``""`` without a digest).
        digest: The request digest it was admitted with, if any.
    """

    flow_schema: str
    priority_level: str
    distinguisher: str
    state: str
    queue_index: int
    initial_seats: int
    final_seats: int
    max_seats: int
    additional_latency_ns: int
    total_work: int
    arrival_time: float
    start_time: float
    release_at: float
    verb: str
    digest: RequestDigest | None


@dataclass(frozen=True, slots=True)
class QueueDump:
    """One fair queue of a queuing level.

    Attributes:
        index: Its position in the queue set.
        waiting: The waiting requests, oldest first.
        executing: The requests it dispatched that are still running, in order of start.
        next_dispatch_r: Virtual time at which its next request may start (raw units).
        seats_in_use: Seats held by its requests (lingering ones included).
        initial_seats_sum: Initial seats of the waiting requests, summed.
        max_seats_sum: Max seats of the waiting requests, summed.
        total_work_sum: Work of the waiting requests, summed (raw units).
        waiting_requests: How many requests wait in it (``len(waiting)`` unless the dump was
            taken with ``waiting=False``, which leaves ``waiting`` empty).
    """

    index: int
    waiting: tuple[RequestDump, ...]
    executing: tuple[RequestDump, ...]
    next_dispatch_r: int
    seats_in_use: int
    initial_seats_sum: int
    max_seats_sum: int
    total_work_sum: int
    waiting_requests: int = 0


@dataclass(frozen=True, slots=True)
class WaitingSummary:
    """The waiting requests of one level, counted by the engine as they joined and left queues.

    What a dump taken with ``waiting=False`` gives instead of the waiting requests: its cost
    does not grow with the number of requests waiting (only ``flows`` grows, with the number
    of distinct flows waiting).

    Attributes:
        requests: Waiting requests by flow schema.
        seats: Seats the waiting requests ask for, by flow schema.
        flows: Waiting requests by flow (flow schema, distinguisher).
        read_only: Waiting requests whose verb is read-only (``READ_ONLY_VERBS``).
    """

    requests: dict[str, int]
    seats: dict[str, int]
    flows: dict[tuple[str, str], int]
    read_only: int


class QueueSetCounts(NamedTuple):
    """A queue set's counters at one moment (what a level's statistics take from it).

    Attributes:
        concurrency_limit: Its current limit, in seats.
        queues: How many queues it has.
        requests_executing: Requests dispatched and not finished.
        seats_in_use: Seats held (lingering requests included).
        requests_waiting: Requests in its queues.
        seats_waiting: Seats the waiting requests ask for.
        dispatched: Requests dispatched so far.
        rejected_queue_full: Arrivals rejected because their queue was full.
        rejected_concurrency_limit: Arrivals rejected at a level without queues.
        timed_out: Waits that ended at their wait limit.
        cancelled: Waits whose waiter left.
    """

    concurrency_limit: int
    queues: int
    requests_executing: int
    seats_in_use: int
    requests_waiting: int
    seats_waiting: int
    dispatched: int
    rejected_queue_full: int
    rejected_concurrency_limit: int
    timed_out: int
    cancelled: int


@dataclass(frozen=True, slots=True)
class QueueSetDump:
    """The state of one queue set beyond its counters: virtual time, queues and requests.

    ``QueueSet.dump`` produces it; ``LevelState.dump`` copies its fields into a
    :class:`LevelDump` (see there for their meaning).
    """

    desired_num_queues: int
    queue_length_limit: int
    hand_size: int
    active_queues: int
    current_r: int
    dispatch_r: int
    latest_s: int
    epoch_advances: int
    epoch_advance_failures: int
    r_overflows: int
    no_accommodation: int
    no_accommodation_by_flow_schema: dict[str, int]
    queues: tuple[QueueDump, ...]
    queueless_executing: tuple[RequestDump, ...]
    lingering: tuple[RequestDump, ...]


@dataclass(frozen=True, slots=True)
class LevelDump:
    """One priority level: its statistics, the state of its queue set, and its requests.

    Attributes:
        name: The level's name.
        statistics: Its limits, counters and demand, as :meth:`Limiter.statistics` reports.
        desired_num_queues: The queue set's ``desiredNumQueues``: -1 exempt, 0 no queuing.
        queue_length_limit: The queue set's queue length limit (kept when queuing stops).
        hand_size: The queue set's hand size (kept when queuing stops).
        max_seats: The most seats one request may take now.
        active_queues: Queues with a waiting or executing request.
        current_r: Virtual time R at the last change (raw units).
        dispatch_r: R at the last dispatch (raw units).
        latest_s: The dispatching queue's virtual start time at the last dispatch (raw units).
        epoch_advances: Successful epoch advances of virtual time.
        epoch_advance_failures: Epoch advances that found a virtual time below the decrement.
        r_overflows: Times R wrapped around (Kubernetes only logs them).
        no_accommodation: Dispatch attempts whose chosen request did not fit.
        no_accommodation_by_flow_schema: The same, by flow schema of the chosen request.
        queues: Its queues, by index.
        queueless_executing: Requests executing without a queue (exempt and ``Reject``
            levels), in order of start.
        lingering: Requests that finished and hold their final seats, in order of start.
        shadow: Whether the level is in shadow mode: its requests run at once, and what this
            dump shows of it (queues, seats, rejections) is what enforcing would have done.
        rejected_flows: Who is being rejected: the flows (flow schema, distinguisher) with
            the most rejections and ended waits over the last minute, as a bounded
            heavy-hitters sketch estimates them (at most 128; ``rejections`` is an upper
            bound, ``rejections - error`` a lower one, by which they are ranked). At a
            shadow level these are the twins': what enforcing would have rejected. Empty
            when the dump is taken without ``now``.
        waiting_summary: With ``waiting=False``: the waiting requests counted (their queues'
            ``waiting`` are then empty); ``None`` in a full dump.
    """

    name: str
    statistics: PriorityLevelStatistics
    desired_num_queues: int
    queue_length_limit: int
    hand_size: int
    max_seats: int
    active_queues: int
    current_r: int
    dispatch_r: int
    latest_s: int
    epoch_advances: int
    epoch_advance_failures: int
    r_overflows: int
    no_accommodation: int
    no_accommodation_by_flow_schema: dict[str, int]
    queues: tuple[QueueDump, ...]
    queueless_executing: tuple[RequestDump, ...]
    lingering: tuple[RequestDump, ...]
    shadow: bool = False
    rejected_flows: tuple[FlowCount, ...] = ()
    waiting_summary: WaitingSummary | None = None

    @property
    def is_idle(self) -> bool:
        """Whether no request is waiting or executing (lingering ones do not count)."""
        stats = self.statistics
        return stats.waiting_requests == 0 and stats.executing_requests == 0


@dataclass(frozen=True, slots=True)
class EngineDump:
    """The whole engine at one moment.

    Attributes:
        statistics: What :meth:`Limiter.statistics` reports (taken in the same instant).
        levels: Every priority level, in configuration order (quiescing ones last).
    """

    statistics: LimiterStatistics
    levels: tuple[LevelDump, ...]
