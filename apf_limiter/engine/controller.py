"""The controller: owns the priority levels, classifies requests and routes them to queue sets.

It is the sans-IO heart behind a :class:`~apf_limiter.Limiter`. Every method takes ``now`` and
returns the requests it dispatched, so that the caller can wake their waiters. It also digests
configurations (as the Kubernetes config controller does), runs borrowing adjustments, and keeps
the per-level and per-flow-schema counters that :meth:`statistics` reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from apf_limiter.config.model import Configuration, PriorityLevel
from apf_limiter.digest import RequestDigest
from apf_limiter.engine.borrowing import (
    BorrowingInput,
    SeatDemandStats,
    compute_borrowing,
)
from apf_limiter.engine.classifier import Classifier
from apf_limiter.engine.concurrency import LevelPlan, plan_levels
from apf_limiter.engine.queueset import NOTHING, QueueSet
from apf_limiter.engine.request import Request, RequestState
from apf_limiter.engine.retry_after import DroppedRequestsTracker
from apf_limiter.engine.seat_seconds import (
    duration_per_seat,
    seats_times_duration,
    to_nanoseconds,
)
from apf_limiter.engine.statistics import (
    FlowSchemaStatistics,
    LimiterStatistics,
    PriorityLevelStatistics,
)

__all__ = ["DEFAULT_MAX_SEATS", "Controller", "LevelState", "FlowSchemaCounters"]

_WAITING: Final = RequestState.WAITING
_EXECUTING: Final = RequestState.EXECUTING

DEFAULT_MAX_SEATS: Final = 100
"""Kubernetes' work-estimator global maximum: the seat cap of every request, and the cap of a
level without a maxSeats of its own (exempt and Reject levels). 100 is its value on the path of
requests without RequestInfo (the larger of the list and mutating estimators' maxima), which is
what a hook's estimate is here."""


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
        demand: The smoothed demand statistics.
        target: The allocation target of the last adjustment.
    """

    __slots__ = (
        "config",
        "plan",
        "queue_set",
        "digested_max_seats",
        "max_seats",
        "quiescing",
        "demand",
        "target",
        "uses_hash",
        "name",
    )

    def __init__(self, config: PriorityLevel, plan: LevelPlan, now: float) -> None:
        self.name = config.name
        self.config = config
        self.plan = plan
        self.quiescing = False
        desired, queue_length_limit, hand_size = _queuing_shape(plan)
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


def _queuing_shape(plan: LevelPlan) -> tuple[int, int, int]:
    if plan.type == "Exempt":
        return -1, 0, 0
    if plan.limit_response == "Queue":
        return plan.queues, plan.queue_length_limit, plan.hand_size
    return 0, 0, 0


def _narrowed_latency(final_seats: int, latency: float, max_seats: int) -> float:
    """The additional latency of final seats clamped to ``max_seats``, keeping their work.

    Kubernetes' estimators clamp final seats this way: fewer seats, held longer, for the same
    final work (and the queue set's clamp at dispatch does the same).
    """
    final_work = seats_times_duration(final_seats, to_nanoseconds(latency))
    return duration_per_seat(final_work, max_seats) / 1e9


class Controller:
    """Owns the priority levels of one configuration and routes requests through them.

    Args:
        config: A validated configuration (with the mandatory objects).
        hash_seed: Seed of the flow hash.
        now: The current time, in seconds.
    """

    def __init__(self, config: Configuration, *, hash_seed: int, now: float) -> None:
        self.hash_seed = hash_seed
        self.tracker = DroppedRequestsTracker()
        self.levels: dict[str, LevelState] = {}
        self.flow_schema_counters: dict[str, FlowSchemaCounters] = {}
        self._routes: dict[str, tuple[LevelState, FlowSchemaCounters]] = {}
        self.fair_fraction = 0.0
        self.borrowing_regime = 0
        self.borrowing_error = ""
        self.adjustments = 0
        # Set when a drained quiescing level was dropped: (limits before, removed levels), for
        # the shell to report; the shell clears it.
        self.quiesce_report: tuple[dict[str, int], list[str]] | None = None
        self.config = config
        self.nominal_limit_sum = 0
        self.classifier = Classifier(
            config.flow_schemas, hash_seed=hash_seed, imagined=config.imagined_flow_schemas
        )
        self.apply(config, now)

    # ----------------------------------------------------------------------------------------
    # configuration

    def apply(self, config: Configuration, now: float) -> list[Request]:
        """Digest a (validated) configuration atomically, then run a borrowing adjustment.

        Changed levels reconfigure their queue sets; removed busy levels quiesce; a level that
        reappears is reused; flow schemas are re-sorted.

        Returns:
            The requests dispatched by the change.

        Raises:
            ValueError: If a flow schema refers to a level the configuration lacks (possible
                only for a hand-built :class:`Configuration`; nothing is changed then).
        """
        level_names = {pl.name for pl in config.priority_levels}
        for schema in config.flow_schemas:
            if schema.priority_level not in level_names:
                raise ValueError(
                    f"flow schema {schema.name!r} refers to priority level "
                    f"{schema.priority_level!r}, which the configuration lacks (build "
                    "configurations with load_config, which validates them)"
                )
        classifier = Classifier(
            config.flow_schemas, hash_seed=self.hash_seed, imagined=config.imagined_flow_schemas
        )
        dispatched: list[Request] = []
        configs: dict[str, PriorityLevel] = {pl.name: pl for pl in config.priority_levels}
        kept: dict[str, LevelState | None] = {name: self.levels.get(name) for name in configs}
        for name, state in self.levels.items():
            if name in configs:
                continue
            # A drained level just goes. Its Retry-After state stays: Kubernetes keeps it
            # by level name for good, so a level configured again carries on where it was.
            if not state.is_drained:
                state.quiescing = True
                configs[name] = state.config
                kept[name] = state
        configured = {pl.name for pl in config.priority_levels}
        plan = plan_levels(list(configs.values()), config.server_concurrency_limit)
        levels: dict[str, LevelState] = {}
        for level_plan in plan.levels:
            name = level_plan.name
            existing = kept[name]
            if existing is None:
                levels[name] = LevelState(configs[name], level_plan, now)
                continue
            if name in configured:
                existing.quiescing = False
            existing.config = configs[name]
            existing.plan = level_plan
            existing.set_max_seats(level_plan.max_seats)
            desired, queue_length_limit, hand_size = _queuing_shape(level_plan)
            existing.uses_hash = desired > 1
            dispatched.extend(
                existing.queue_set.configure(
                    desired_num_queues=desired,
                    queue_length_limit=queue_length_limit,
                    hand_size=hand_size,
                    concurrency_limit=existing.queue_set.concurrency_limit,
                    now=now,
                )
            )
            levels[name] = existing
        counters = {
            schema.name: self.flow_schema_counters.get(schema.name) or FlowSchemaCounters()
            for schema in classifier.flow_schemas
        }
        self.levels = levels
        self.classifier = classifier
        self.flow_schema_counters = counters
        self._routes = {
            schema.name: (levels[schema.priority_level], counters[schema.name])
            for schema in classifier.flow_schemas
        }
        self.config = config
        self.nominal_limit_sum = plan.nominal_limit_sum
        self._count_dispatched(dispatched)
        dispatched.extend(self.adjust_borrowing(now))
        return dispatched

    # ----------------------------------------------------------------------------------------
    # borrowing

    def adjust_borrowing(self, now: float, *, waking: LevelState | None = None) -> list[Request]:
        """Run one borrowing adjustment: read the demand, share the seats, apply the limits.

        Args:
            now: The current time.
            waking: A level at limit 0 where a request just started waiting (deviation D5):
                its seat demand now counts as its smoothed demand in this adjustment. Its
                smoothed demand is still about 0 (the request has only just arrived), and a
                level without nominal seats has no lower limit to open it otherwise.

        Returns:
            The requests dispatched because limits went up.
        """
        states = list(self.levels.values())
        inputs = []
        for state in states:
            state.demand.update(state.queue_set.demand.reset(now))
            plan = state.plan
            smoothed = state.demand.smoothed
            if state is waking:
                queue_set = state.queue_set
                smoothed = max(smoothed, queue_set.seats_in_use + queue_set.seats_waiting)
            inputs.append(
                BorrowingInput(
                    exempt=plan.type == "Exempt",
                    nominal_limit=plan.nominal_limit,
                    lower_limit=plan.lower_limit,
                    upper_limit=plan.upper_limit,
                    high_watermark=state.demand.high_watermark,
                    smoothed=smoothed,
                    current_limit=state.queue_set.concurrency_limit,
                )
            )
        result = compute_borrowing(self.nominal_limit_sum, inputs)
        self.adjustments += 1
        self.fair_fraction = result.fair_fraction
        self.borrowing_regime = result.regime
        self.borrowing_error = result.error
        dispatched: list[Request] = []
        for state, limit, target in zip(states, result.current_limits, result.targets, strict=True):
            state.target = target
            dispatched.extend(state.queue_set.set_concurrency_limit(limit, now))
        self._count_dispatched(dispatched)
        return dispatched

    # ----------------------------------------------------------------------------------------
    # requests

    def start(self, digest: RequestDigest, now: float) -> tuple[Request, Sequence[Request]]:
        """Classify a request and start it at its level.

        Returns:
            The engine request (its ``state`` says whether it is executing, waiting or was
            rejected) and every request dispatched by its arrival.
        """
        classification = self.classifier.classify(digest)
        schema_name = classification.flow_schema.name
        level, counters = self._routes[schema_name]
        max_seats = level.max_seats
        seats = digest.seats or 1
        if seats > max_seats:
            seats = max_seats
        final_seats = digest.final_seats
        latency = digest.additional_latency
        if latency > 0:
            # The request holds its seats (the wider of its initial and final seats) until
            # the latency has passed after it finishes, final seats or not (as Kubernetes).
            if final_seats > max_seats:
                latency = _narrowed_latency(final_seats, latency, max_seats)
                final_seats = max_seats
        else:
            # Final seats mean something only with an additional latency to hold them for.
            final_seats = 0
            latency = 0.0
        # Kubernetes computes the flow (distinguisher and hash) only for a level that hashes:
        # non-exempt, Queue, more than one queue.
        if level.uses_hash:
            distinguisher = classification.distinguisher
            flow_hash = classification.flow_hash
        else:
            distinguisher = ""
            flow_hash = 0
        request = Request(
            schema_name,
            level.name,
            distinguisher,
            flow_hash,
            seats,
            final_seats,
            latency,
        )
        request.digest = digest
        request.level = level
        request.counters = counters
        counters.matched += 1
        dispatched = level.queue_set.start_request(request, now)
        state = request.state
        if state is _EXECUTING:
            if len(dispatched) == 1:
                counters.dispatched += 1
                counters.executing += 1
                return request, dispatched
        elif state is _WAITING:
            counters.waiting += 1
        elif request.reject_reason == "queue-full":
            counters.rejected_queue_full += 1
        else:
            counters.rejected_concurrency_limit += 1
        if dispatched:
            self._count_dispatched(dispatched, arrival=request)
        return request, dispatched

    def finish(self, request: Request, now: float, ran: bool = True) -> Sequence[Request]:
        """Record that an executing request's handler returned or failed.

        If the request has an additional latency it goes on holding its final seats: its
        state becomes ``LINGERING`` and the caller must call :meth:`release` at
        ``request.release_at``. Not so with ``ran=False``: a request dispatched at the instant
        its waiter left never ran (see :meth:`QueueSet.finish`).

        Returns:
            The requests dispatched by the freed seats.
        """
        level: LevelState = request.level
        dispatched = level.queue_set.finish(request, now, ran)  # positional: every release
        request.counters.executing -= 1
        if dispatched:
            self._count_dispatched(dispatched)
        return self._drop_if_drained(level, dispatched, now)

    def release(self, request: Request, now: float) -> Sequence[Request]:
        """Release a lingering request's final seats.

        Returns:
            The requests dispatched by the freed seats.
        """
        level: LevelState = request.level
        dispatched = level.queue_set.release(request, now)
        if dispatched:
            self._count_dispatched(dispatched)
        return self._drop_if_drained(level, dispatched, now)

    def cancel(self, request: Request, now: float, *, timed_out: bool) -> Sequence[Request]:
        """Remove a waiting request: its wait limit passed (``timed_out``) or its waiter left.

        Returns:
            The requests dispatched afterwards.
        """
        level: LevelState = request.level
        dispatched = level.queue_set.cancel(request, now, timed_out=timed_out)
        counters: FlowSchemaCounters = request.counters
        counters.waiting -= 1
        if timed_out:
            counters.timed_out += 1
        else:
            counters.cancelled += 1
        if dispatched:
            self._count_dispatched(dispatched)
        return self._drop_if_drained(level, dispatched, now)

    def retry_after(self, request: Request) -> int:
        """The current Retry-After of the request's level (nothing recorded)."""
        return self.tracker.retry_after(request.priority_level)

    def record_rejection(self, request: Request, now: float) -> int:
        """Record a dropped request for its level's Retry-After and return the new value."""
        level = request.priority_level
        self.tracker.record_dropped(level, int(now // 1))
        return self.tracker.retry_after(level)

    @property
    def waiting_requests(self) -> int:
        """Requests waiting in any queue."""
        return sum(state.queue_set.requests_waiting for state in self.levels.values())

    @staticmethod
    def _count_dispatched(dispatched: Iterable[Request], arrival: Request | None = None) -> None:
        for request in dispatched:
            counters: FlowSchemaCounters = request.counters
            counters.dispatched += 1
            counters.executing += 1
            if request is not arrival:
                counters.waiting -= 1

    def _drop_if_drained(
        self, level: LevelState, dispatched: Sequence[Request], now: float
    ) -> Sequence[Request]:
        """After a request left ``level``: drop the level if it was quiescing and is now idle."""
        if not (level.quiescing and level.is_drained):
            return dispatched
        if self.levels.get(level.name) is not level:
            # Already dropped: a request that lingered past the drop released its final seats.
            return dispatched
        return self._requeue_after_quiesce(dispatched, now)

    def _requeue_after_quiesce(self, dispatched: Sequence[Request], now: float) -> list[Request]:
        # A drained quiescing level is dropped by a fresh digest of the same configuration, as
        # Kubernetes re-queues a full config sync; shares and limits are recomputed without it.
        limits = {name: state.queue_set.concurrency_limit for name, state in self.levels.items()}
        result = list(dispatched) if dispatched is not NOTHING else []
        result.extend(self.apply(self.config, now))
        removed = sorted(set(limits) - set(self.levels))
        self.quiesce_report = (limits, removed)
        return result

    # ----------------------------------------------------------------------------------------
    # statistics

    def statistics(self) -> LimiterStatistics:
        """Return a frozen snapshot of every level and flow schema."""
        levels: dict[str, PriorityLevelStatistics] = {}
        for name, state in self.levels.items():
            plan = state.plan
            qs = state.queue_set
            timed_out = qs.timed_out
            levels[name] = PriorityLevelStatistics(
                name=name,
                type=plan.type,
                limit_response=plan.limit_response,
                quiescing=state.quiescing,
                nominal_limit=plan.nominal_limit,
                lendable_limit=plan.lendable_limit,
                borrowing_limit=plan.borrowing_limit,
                lower_limit=plan.lower_limit,
                upper_limit=plan.upper_limit,
                current_limit=qs.concurrency_limit,
                target_limit=state.target,
                max_seats=state.digested_max_seats,
                queues=len(qs.queues),
                executing_requests=qs.requests_executing,
                executing_seats=qs.seats_in_use,
                waiting_requests=qs.requests_waiting,
                waiting_seats=qs.seats_waiting,
                dispatched=qs.dispatched,
                rejected={
                    "queue-full": qs.rejected_queue_full,
                    "concurrency-limit": qs.rejected_concurrency_limit,
                    "time-out": timed_out,
                },
                timed_out=timed_out,
                cancelled=qs.cancelled,
                demand_high_watermark=state.demand.high_watermark,
                demand_average=state.demand.average,
                demand_stdev=state.demand.stdev,
                demand_smoothed=state.demand.smoothed,
            )
        schemas: dict[str, FlowSchemaStatistics] = {}
        for schema in self.classifier.flow_schemas:
            counters = self.flow_schema_counters[schema.name]
            schemas[schema.name] = FlowSchemaStatistics(
                name=schema.name,
                priority_level=schema.priority_level,
                matching_precedence=schema.matching_precedence,
                matched=counters.matched,
                dispatched=counters.dispatched,
                rejected={
                    "queue-full": counters.rejected_queue_full,
                    "concurrency-limit": counters.rejected_concurrency_limit,
                    "time-out": counters.timed_out,
                },
                cancelled=counters.cancelled,
                executing_requests=counters.executing,
                waiting_requests=counters.waiting,
            )
        return LimiterStatistics(
            server_concurrency_limit=self.config.server_concurrency_limit,
            nominal_limit_sum=self.nominal_limit_sum,
            fair_fraction=self.fair_fraction,
            borrowing_regime=self.borrowing_regime,
            adjustments=self.adjustments,
            priority_levels=levels,
            flow_schemas=schemas,
            borrowing_error=self.borrowing_error,
        )
