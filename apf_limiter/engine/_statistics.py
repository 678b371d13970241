"""Frozen snapshots of a limiter's state, returned by ``Limiter.statistics()``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PriorityLevelStatistics:
    """One priority level at one moment.

    Attributes:
        name: The level's name.
        type: ``"Exempt"`` or ``"Limited"``.
        limit_response: ``"Queue"``, ``"Reject"``, or ``""`` for the exempt level.
        quiescing: Whether the level was removed from the configuration and is draining.
        nominal_limit: NominalCL: the level's share of the server limit, in seats.
        lendable_limit: LendableCL: seats other levels may borrow.
        borrowing_limit: BorrowingCL: seats this level may borrow on top of its nominal limit.
        lower_limit: MinCL = nominal − lendable.
        upper_limit: MaxCL = nominal + borrowing.
        current_limit: The limit in force now, set by the last borrowing adjustment.
        target_limit: The allocation target of the last borrowing adjustment.
        max_seats: The most seats one request of this level may take (0 when not queuing).
        queues: Number of queues in the level's queue set: 0 for a level that never queued.
            A level whose queues were reduced (or that switched to ``Reject``) drops a surplus
            queue only once a request of that queue finishes, as Kubernetes does, so the
            count can stay above the configured number (or above 0).
        executing_requests: Requests running now.
        executing_seats: Seats held now (requests in their additional latency included).
        waiting_requests: Requests waiting in queues.
        waiting_seats: Seats wanted by the waiting requests.
        dispatched: Requests started since the level was created.
        rejected: Rejections by reason (``queue-full``, ``concurrency-limit``, ``time-out``);
            ``time-out`` counts queue waits that hit their limit.
        timed_out: Same as ``rejected["time-out"]``.
        cancelled: Waiting requests whose waiter went away (task cancelled).
        demand_high_watermark: Highest seat demand in the last borrowing period (rounded).
        demand_average: Average seat demand in the last borrowing period.
        demand_stdev: Standard deviation of the seat demand in the last borrowing period.
        demand_smoothed: The smoothed seat demand that borrowing aims for.
    """

    name: str
    type: str
    limit_response: str
    quiescing: bool
    nominal_limit: int
    lendable_limit: int
    borrowing_limit: int
    lower_limit: int
    upper_limit: int
    current_limit: int
    target_limit: float
    max_seats: int
    queues: int
    executing_requests: int
    executing_seats: int
    waiting_requests: int
    waiting_seats: int
    dispatched: int
    rejected: Mapping[str, int]
    timed_out: int
    cancelled: int
    demand_high_watermark: int
    demand_average: float
    demand_stdev: float
    demand_smoothed: float


@dataclass(frozen=True, slots=True)
class FlowSchemaStatistics:
    """One flow schema's counters.

    Attributes:
        name: The schema's name.
        priority_level: The name of the level it classifies into.
        matching_precedence: Its matching precedence.
        matched: Requests classified into this schema.
        dispatched: Of those, requests that started executing.
        rejected: Rejections by reason (as for levels).
        cancelled: Waiting requests whose waiter went away.
        executing_requests: Requests of this schema running now.
        waiting_requests: Requests of this schema waiting now.
    """

    name: str
    priority_level: str
    matching_precedence: int
    matched: int
    dispatched: int
    rejected: Mapping[str, int]
    cancelled: int
    executing_requests: int
    waiting_requests: int


@dataclass(frozen=True, slots=True)
class LimiterStatistics:
    """The whole limiter at one moment.

    Attributes:
        server_concurrency_limit: ServerCL.
        nominal_limit_sum: Sum of the nominal limits (what borrowing distributes).
        fair_fraction: The fair proportion of the last borrowing adjustment (0 in regimes 1–2).
        borrowing_regime: Which regime the last adjustment was in (1, 2 or 3).
        adjustments: Borrowing adjustments run so far.
        priority_levels: Per level, by name (in configuration order, quiescing ones last).
        flow_schemas: Per flow schema, by name, in matching order.
        borrowing_error: Why the last adjustment's solver failed (the limits were kept), or
            ``""``.
    """

    server_concurrency_limit: int
    nominal_limit_sum: int
    fair_fraction: float
    borrowing_regime: int
    adjustments: int
    priority_levels: Mapping[str, PriorityLevelStatistics]
    flow_schemas: Mapping[str, FlowSchemaStatistics]
    borrowing_error: str = ""

    @property
    def executing_requests(self) -> int:
        """Requests running now, over all levels."""
        return sum(level.executing_requests for level in self.priority_levels.values())

    @property
    def waiting_requests(self) -> int:
        """Requests waiting now, over all levels."""
        return sum(level.waiting_requests for level in self.priority_levels.values())

    @property
    def executing_seats(self) -> int:
        """Seats held now, over all levels."""
        return sum(level.executing_seats for level in self.priority_levels.values())


@dataclass(frozen=True, slots=True)
class AdaptiveStatistics:
    """The adaptive server limit (``adaptiveConcurrency``) at one moment.

    Attributes:
        algorithm: ``"Gradient"`` or ``"AIMD"``.
        limit: The learned limit, unrounded.
        applied_limit: The limit in force as ServerCL.
        min_limit: The lower bound of the limit.
        max_limit: The upper bound of the limit.
        baselines: Per priority level, its baseline execution time (seconds).
        last_ratio: The latency ratio (latency over baseline) of the last update.
        last_latency: The execution time of the last request sampled (seconds).
        updates: Updates run so far.
        probes: Probes run so far: moments the limit in force was lowered to see the
            backend's latency below the concurrency that ran (see docs/adaptive.md).
        probing: Whether a probe holds ``applied_limit`` low now (``limit`` is kept).
    """

    algorithm: str
    limit: float
    applied_limit: int
    min_limit: int
    max_limit: int
    baselines: Mapping[str, float]
    last_ratio: float
    last_latency: float
    updates: int
    probes: int = 0
    probing: bool = False
