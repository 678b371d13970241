"""A priority level at run time: its plan, queue set, seat cap and demand statistics.

Upstream, this is the controller's ``priorityLevelState`` (``apf_controller.go``): what a
configuration digest keeps for each level, and what a borrowing adjustment reads and sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from apf_limiter.config._model import Configuration, PriorityLevel
from apf_limiter.engine._borrowing import BorrowingInput, SeatDemandStats
from apf_limiter.engine._concurrency import LevelPlan
from apf_limiter.engine._dump import LevelDump
from apf_limiter.engine._heavy_hitters import RejectedFlows
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request
from apf_limiter.engine._seat_seconds import (
    duration_per_seat,
    seats_times_duration,
    to_nanoseconds,
)
from apf_limiter.engine._shuffle_sharding import Dealer
from apf_limiter.engine._statistics import PriorityLevelStatistics

DEFAULT_MAX_SEATS: Final = 100
"""Kubernetes' work-estimator global maximum: the seat cap of every request, and the cap of a
level without a maxSeats of its own (exempt and Reject levels). 100 is its value on the path of
requests without RequestInfo (the larger of the list and mutating estimators' maxima), which is
what a hook's estimate is here."""


class LevelState:
    """A priority level at run time: its configuration, plan, queue set and demand statistics.

    Attributes:
        name: The level's name.
        config: The level's configuration (the last one seen, for a quiescing level).
        plan: The level's limits under the current configuration.
        queue_set: Its queue set.
        digested_max_seats: Kubernetes' maxSeats of the level: set for a queuing level at each
            configuration, kept (stale) when it switches to ``Reject``; 0 if it never queued.
        max_seats: The most seats one request may take: ``digested_max_seats``, capped at
            :data:`DEFAULT_MAX_SEATS` (which also stands in for 0).
        quiescing: Whether the level left the configuration and is draining.
        shadow: Whether the level is in shadow mode: its requests run at once and the shell
            holds each one's virtual twin here, as if enforced (never for an exempt level).
        demand: The smoothed demand statistics.
        target: The allocation target of the last adjustment.
        rejected_flows: Its rejections and ended waits by flow over the last minute, in
            bounded memory (at a shadow level: the twins', what enforcing would reject).
    """

    __slots__ = (
        "config",
        "plan",
        "queue_set",
        "digested_max_seats",
        "max_seats",
        "quiescing",
        "shadow",
        "demand",
        "target",
        "uses_hash",
        "name",
        "rejected_flows",
    )

    def __init__(self, config: PriorityLevel, plan: LevelPlan, now: float) -> None:
        self.name = config.name
        self.config = config
        self.plan = plan
        self.quiescing = False
        self.shadow = False
        desired, queue_length_limit, hand_size = queuing_shape(plan)
        self.queue_set = QueueSet(
            config.name,
            desired_num_queues=desired,
            queue_length_limit=queue_length_limit,
            hand_size=hand_size,
            concurrency_limit=plan.initial_limit,
            now=now,
        )
        self.digested_max_seats = 0
        self.set_max_seats(plan.max_seats)  # sets max_seats
        self.uses_hash = desired > 1
        self.demand = SeatDemandStats()
        self.target = 0.0
        self.rejected_flows = RejectedFlows()

    def reconfigure(self, config: PriorityLevel, plan: LevelPlan) -> None:
        """Take a new configuration and plan, keeping the current limit (borrowing sets it).

        The queue set takes the new queuing shape in the borrowing adjustment that ends the
        digest (:meth:`configure_queue_set`), once, with the new limit, as Kubernetes'
        ``finishQueueSetReconfigsLocked`` completes each queue set in ``updateBorrowingLocked``.

        Raises:
            ValueError: If the queuing shape makes an invalid dealer (a hand-built
                configuration; ``load_config`` validates this).
        """
        desired, _, hand_size = queuing_shape(plan)
        if desired > 0:
            Dealer(desired, hand_size)  # an invalid shape raises here, before any change
        self.config = config
        self.plan = plan
        self.set_max_seats(plan.max_seats)
        self.uses_hash = desired > 1

    def configure_queue_set(self, concurrency_limit: int, now: float) -> Sequence[Request]:
        """Give the queue set the plan's queuing shape and ``concurrency_limit``, then dispatch.

        Returns:
            The requests dispatched (``queueset.go``, ``setConfiguration``).
        """
        desired, queue_length_limit, hand_size = queuing_shape(self.plan)
        return self.queue_set.configure(
            desired_num_queues=desired,
            queue_length_limit=queue_length_limit,
            hand_size=hand_size,
            concurrency_limit=concurrency_limit,
            now=now,
        )

    def borrowing_input(self, now: float, *, waking: bool) -> BorrowingInput:
        """Read and reset the seat-demand integrator into the smoothed demand; the level's part.

        Args:
            now: The time of the adjustment.
            waking: Whether the adjustment opens this level (deviation D5): its current seat
                demand then counts as its smoothed demand.
        """
        queue_set = self.queue_set
        self.demand.update(queue_set.update_observations(now))
        plan = self.plan
        smoothed = self.demand.smoothed
        if waking:
            smoothed = max(smoothed, queue_set.seat_demand)
        return BorrowingInput(
            exempt=plan.type == "Exempt",
            nominal_limit=plan.nominal_limit,
            lower_limit=plan.lower_limit,
            upper_limit=plan.upper_limit,
            high_watermark=self.demand.high_watermark,
            smoothed=smoothed,
            current_limit=queue_set.concurrency_limit,
        )

    def set_max_seats(self, max_seats: int) -> None:
        """Take a configuration's maxSeats (0 for a level that does not queue)."""
        # Kubernetes sets maxSeats for queuing levels only and never clears it, so a level
        # switched from Queue to Reject keeps its old value until it is removed.
        if max_seats > 0:
            self.digested_max_seats = max_seats
        seats = self.digested_max_seats
        self.max_seats = seats if 0 < seats <= DEFAULT_MAX_SEATS else DEFAULT_MAX_SEATS

    @property
    def is_drained(self) -> bool:
        """Whether the level's queue set is idle: nothing waits and nothing executes.

        Requests holding their final seats for an additional latency do not count, as in
        Kubernetes: a removed level is dropped once idle, and they release into it later.
        """
        return self.queue_set.is_idle

    def statistics(self) -> PriorityLevelStatistics:
        """Return a frozen snapshot of the level."""
        plan = self.plan
        counts = self.queue_set.counts()
        timed_out = counts.timed_out
        demand = self.demand
        return PriorityLevelStatistics(
            name=self.name,
            type=plan.type,
            limit_response=plan.limit_response,
            quiescing=self.quiescing,
            nominal_limit=plan.nominal_limit,
            lendable_limit=plan.lendable_limit,
            borrowing_limit=plan.borrowing_limit,
            lower_limit=plan.lower_limit,
            upper_limit=plan.upper_limit,
            current_limit=counts.concurrency_limit,
            target_limit=self.target,
            max_seats=self.digested_max_seats,
            queues=counts.queues,
            executing_requests=counts.requests_executing,
            executing_seats=counts.seats_in_use,
            waiting_requests=counts.requests_waiting,
            waiting_seats=counts.seats_waiting,
            dispatched=counts.dispatched,
            rejected={
                "queue-full": counts.rejected_queue_full,
                "concurrency-limit": counts.rejected_concurrency_limit,
                "time-out": timed_out,
            },
            timed_out=timed_out,
            cancelled=counts.cancelled,
            demand_high_watermark=demand.high_watermark,
            demand_average=demand.average,
            demand_stdev=demand.stdev,
            demand_smoothed=demand.smoothed,
        )

    def dump(
        self, statistics: PriorityLevelStatistics, now: float | None, waiting: bool = True
    ) -> LevelDump:
        """Copy the level and its queue set into a :class:`LevelDump` (a pure read).

        Args:
            statistics: The level's statistics, taken in the same instant.
            now: The current time, which says which rejections are in the last minute
                (``LevelDump.rejected_flows``); ``None`` leaves those out.
            waiting: ``False`` copies no waiting request: ``waiting_summary`` counts them.
        """
        dumped = self.queue_set.dump(waiting)
        return LevelDump(
            waiting_summary=None if waiting else self.queue_set.waiting_summary(),
            name=self.name,
            shadow=self.shadow,
            rejected_flows=() if now is None else self.rejected_flows.top(now),
            statistics=statistics,
            desired_num_queues=dumped.desired_num_queues,
            queue_length_limit=dumped.queue_length_limit,
            hand_size=dumped.hand_size,
            max_seats=self.max_seats,
            active_queues=dumped.active_queues,
            current_r=dumped.current_r,
            dispatch_r=dumped.dispatch_r,
            latest_s=dumped.latest_s,
            epoch_advances=dumped.epoch_advances,
            epoch_advance_failures=dumped.epoch_advance_failures,
            r_overflows=dumped.r_overflows,
            no_accommodation=dumped.no_accommodation,
            no_accommodation_by_flow_schema=dumped.no_accommodation_by_flow_schema,
            queues=dumped.queues,
            queueless_executing=dumped.queueless_executing,
            lingering=dumped.lingering,
        )


def check_level_references(config: Configuration) -> None:
    """Refuse a configuration whose flow schemas name a level it lacks.

    Raises:
        ValueError: If so (possible only for a hand-built :class:`Configuration`:
            ``load_config`` validates this).
    """
    level_names = {pl.name for pl in config.priority_levels}
    for schema in config.flow_schemas:
        if schema.priority_level not in level_names:
            raise ValueError(
                f"flow schema {schema.name!r} refers to priority level "
                f"{schema.priority_level!r}, which the configuration lacks (build "
                "configurations with load_config, which validates them)"
            )


def queuing_shape(plan: LevelPlan) -> tuple[int, int, int]:
    if plan.type == "Exempt":
        return -1, 0, 0
    if plan.limit_response == "Queue":
        return plan.queues, plan.queue_length_limit, plan.hand_size
    return 0, 0, 0


def narrowed_latency(final_seats: int, latency: float, max_seats: int) -> float:
    """The additional latency of final seats clamped to ``max_seats``, keeping their work.

    Kubernetes' estimators clamp final seats this way: fewer seats, held longer, for the same
    final work (and the queue set's clamp at dispatch does the same).

    A final work too large for the engine's 64-bit seat-seconds (Kubernetes' conversion
    overflows there: a wrapped, tiny latency) is held for :data:`MAX_NARROWED_LATENCY`: the
    longest a level's widest request can hold its seats without wrapping its own work.
    """
    latency_ns = to_nanoseconds(latency)
    if final_seats * latency_ns >= _WORK_BOUND:
        return MAX_NARROWED_LATENCY
    final_work = seats_times_duration(final_seats, latency_ns)
    narrowed = duration_per_seat(final_work, max_seats) / 1e9
    return narrowed if narrowed < MAX_NARROWED_LATENCY else MAX_NARROWED_LATENCY


#: The longest additional latency after narrowing, in seconds (about three years): 100 seats
#: (:data:`DEFAULT_MAX_SEATS`) held for it are 10**18 seat-second units, well inside 64 bits.
MAX_NARROWED_LATENCY: Final = 1e8
#: ``seats × nanoseconds`` from which a final work no longer fits in 63 bits (10 ns units).
_WORK_BOUND: Final = 10 * 2**63
