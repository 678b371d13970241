"""The controller: owns the priority levels, classifies requests and routes them to queue sets.

It is the sans-IO heart behind a :class:`~apf_limiter.Limiter`. Every entry point takes ``now``
and returns an :class:`~apf_limiter.engine._effects.Effects` value (requests dispatched, limits
moved, levels removed) for the shell to act on. It also digests configurations (as the
Kubernetes config controller does, ``apf_controller.go``), runs borrowing adjustments, records
dropped requests for Retry-After, and keeps the counters that :meth:`statistics` reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from apf_limiter._digest import RequestDigest
from apf_limiter.config._model import Configuration, PriorityLevel
from apf_limiter.engine._borrowing import compute_borrowing
from apf_limiter.engine._classifier import Classifier, classifier_for
from apf_limiter.engine._concurrency import plan_levels
from apf_limiter.engine._dump import EngineDump
from apf_limiter.engine._effects import NO_EFFECTS, Effects, limit_changes
from apf_limiter.engine._level import LevelState, check_level_references, narrowed_latency
from apf_limiter.engine._request import (
    FlowSchemaCounters,
    Request,
    RequestLevel,
    RequestState,
)
from apf_limiter.engine._retry_after import DroppedRequestsTracker
from apf_limiter.engine._statistics import (
    FlowSchemaStatistics,
    LimiterStatistics,
    PriorityLevelStatistics,
)

_WAITING: Final = RequestState.WAITING
_EXECUTING: Final = RequestState.EXECUTING


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
        self.config = config
        self.nominal_limit_sum = 0
        self.classifier = Classifier(
            config.flow_schemas, hash_seed=hash_seed, imagined=config.imagined_flow_schemas
        )
        self._apply(config, now, None)

    # ----------------------------------------------------------------------------------------
    # configuration

    def prepare(self, config: Configuration) -> Classifier:
        """The classifier of ``config``, for :meth:`apply`; reads nothing live (any thread)."""
        return classifier_for(config.flow_schemas, config.imagined_flow_schemas, self.hash_seed)

    def apply(self, config: Configuration, now: float, ready: Classifier | None = None) -> Effects:
        """Digest a (validated) configuration atomically, then run a borrowing adjustment.

        Changed levels reconfigure their queue sets; removed busy levels quiesce; a level that
        reappears is reused; flow schemas are re-sorted (unless ``ready`` is :meth:`prepare`'s).

        Returns:
            The requests dispatched, the limits moved and the levels now quiescing.

        Raises:
            ValueError: If a flow schema refers to a level the configuration lacks (possible
                only for a hand-built :class:`Configuration`; nothing is changed then).
        """
        limits = self._limits()
        quiescing = {name for name, state in self.levels.items() if state.quiescing}
        dispatched = self._apply(config, now, ready)
        newly_quiescing = sorted(name for name, state in self.levels.items() if state.quiescing)
        return Effects(
            dispatched,
            limit_changes(limits, self._limits()),
            quiescing_levels=[name for name in newly_quiescing if name not in quiescing],
        )

    def _apply(self, config: Configuration, now: float, ready: Classifier | None) -> list[Request]:
        """:meth:`apply`, returning only the requests dispatched."""
        check_level_references(config)
        schemas, imagined = config.flow_schemas, config.imagined_flow_schemas
        classifier = classifier_for(schemas, imagined, self.hash_seed, (ready, self.classifier))
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
            existing.reconfigure(configs[name], level_plan)
            levels[name] = existing
        counters = {
            schema.name: self.flow_schema_counters.get(schema.name) or FlowSchemaCounters()
            for schema in classifier.flow_schemas
        }
        for name, state in levels.items():
            state.shadow = not state.plan.is_exempt and config.enforcement_of(name) == "Shadow"
        self.levels = levels
        self.classifier = classifier
        self.flow_schema_counters = counters
        self._routes = {
            schema.name: (levels[schema.priority_level], counters[schema.name])
            for schema in classifier.flow_schemas
        }
        self.config = config
        self.nominal_limit_sum = plan.nominal_limit_sum
        # Each queue set is reconfigured once, with its new limit, in the adjustment
        # (apf_controller.go: finishQueueSetReconfigsLocked, then updateBorrowingLocked).
        return list(self._adjust_borrowing(now, None, reconfigure=True).dispatched)

    # ----------------------------------------------------------------------------------------
    # borrowing

    def adjust_borrowing(self, now: float) -> Effects:
        """Run one borrowing adjustment: read the demand, share the seats, apply the limits.

        Returns:
            The requests dispatched because limits went up, and the limits that moved.
        """
        return self._adjust_borrowing(now, None)

    def open_level(self, request: Request, now: float) -> Effects:
        """Give a request that just started waiting at a level whose limit is 0 its chance.

        A level whose current limit is 0 admits nothing (deviation D3) until borrowing gives
        it seats. Rather than leave the request to wait for the next period, this runs a
        borrowing adjustment now with the request in its level's demand (deviation D5). Its
        smoothed demand is still about 0 (the request has only just arrived), and a level
        without nominal seats has no lower limit to open it otherwise.

        Returns:
            :data:`NO_EFFECTS` when the request does not wait at a closed level; else what the
            adjustment changed (the request itself may be among the dispatched).
        """
        level = request.level
        if request.state is not _WAITING or level.queue_set.concurrency_limit > 0:
            return NO_EFFECTS
        return self._adjust_borrowing(now, level)

    def _adjust_borrowing(
        self, now: float, waking: RequestLevel | None, *, reconfigure: bool = False
    ) -> Effects:
        """One borrowing adjustment; ``waking``'s seat demand counts as its smoothed demand.

        With ``reconfigure`` (a digest), each queue set also takes its level's queuing shape.
        """
        states = list(self.levels.values())
        inputs = [state.borrowing_input(now, waking=state is waking) for state in states]
        result = compute_borrowing(self.nominal_limit_sum, inputs)
        self.adjustments += 1
        self.fair_fraction = result.fair_fraction
        self.borrowing_regime = result.regime
        self.borrowing_error = result.error
        dispatched: list[Request] = []
        changes: dict[str, tuple[int, int]] = {}
        for state, limit, target in zip(states, result.current_limits, result.targets, strict=True):
            state.target = target
            old = state.queue_set.concurrency_limit
            if limit != old:
                changes[state.name] = (old, limit)
            if reconfigure:
                dispatched.extend(state.configure_queue_set(limit, now))
            else:
                dispatched.extend(state.queue_set.set_concurrency_limit(limit, now))
        self._count_dispatched(dispatched)
        return Effects(dispatched, changes)

    # ----------------------------------------------------------------------------------------
    # requests

    def start(self, digest: RequestDigest, now: float) -> tuple[Request, Effects]:
        """Classify a request and start it at its level.

        A rejected request's drop is recorded for its level's Retry-After (``retry_after``).

        Returns:
            The engine request (its ``state`` says whether it is executing, waiting or was
            rejected) and what else its arrival changed (other requests it dispatched).
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
                latency = narrowed_latency(final_seats, latency, max_seats)
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
                return request, NO_EFFECTS
        elif state is _WAITING:
            counters.waiting += 1
        else:
            if request.reject_reason == "queue-full":
                counters.rejected_queue_full += 1
            else:
                counters.rejected_concurrency_limit += 1
            self._record_drop(request, now)
        if not dispatched:
            return request, NO_EFFECTS
        self._count_dispatched(dispatched, arrival=request)
        return request, Effects([other for other in dispatched if other is not request])

    def finish(self, request: Request, now: float, ran: bool = True) -> Effects:
        """Record that an executing request's handler returned or failed.

        If the request has an additional latency it goes on holding its final seats: its
        state becomes ``LINGERING`` and the caller must call :meth:`release` at
        ``request.release_at``. Not so with ``ran=False``: a request dispatched at the instant
        its waiter left never ran (see :meth:`QueueSet.finish`).

        Returns:
            The requests dispatched by the freed seats (and a drained level's removal).
        """
        level = request.level
        dispatched = level.queue_set.finish(request, now, ran)  # positional: every release
        request.counters.executing -= 1
        if not dispatched:
            if not level.quiescing:
                return NO_EFFECTS  # the fast path
        else:
            self._count_dispatched(dispatched)
        return self._settled(level, dispatched, now)

    def release(self, request: Request, now: float) -> Effects:
        """Release a lingering request's final seats.

        Returns: the requests dispatched by the freed seats (and a drained level's removal).
        """
        level = request.level
        dispatched = level.queue_set.release(request, now)
        if dispatched:
            self._count_dispatched(dispatched)
        return self._settled(level, dispatched, now)

    def cancel(self, request: Request, now: float, *, timed_out: bool) -> Effects:
        """Remove a waiting request: its wait limit passed (``timed_out``) or its waiter left.

        Either way the drop is recorded for its level's Retry-After (``retry_after``), and
        ``ended_at`` is set to ``now``.

        Returns:
            The requests dispatched afterwards (and a drained level's removal).
        """
        level = request.level
        dispatched = level.queue_set.cancel(request, now, timed_out=timed_out)
        request.ended_at = now
        counters = request.counters
        counters.waiting -= 1
        if timed_out:
            counters.timed_out += 1
        else:
            counters.cancelled += 1
        self._record_drop(request, now)
        if dispatched:
            self._count_dispatched(dispatched)
        return self._settled(level, dispatched, now)

    def retry_after(self, request: Request) -> int:
        """The current Retry-After of the request's level (nothing recorded)."""
        return self.tracker.retry_after(request.priority_level)

    def is_exempt(self, request: Request) -> bool:
        """Whether the request's level is exempt."""
        return request.level.queue_set.is_exempt

    def level_usage(self, name: str) -> tuple[int, int] | None:
        """The current limit of the level named ``name`` and its seats in use now.

        ``None`` for an exempt level (it has no limit) or one that does not exist.
        """
        state = self.levels.get(name)
        if state is None or state.queue_set.is_exempt:
            return None
        counts = state.queue_set.counts()
        return counts.concurrency_limit, counts.seats_in_use

    def is_shadow(self, request: Request) -> bool:
        """Whether the request's level is in shadow mode (enforcement ``Shadow``)."""
        return request.level.shadow

    def overdue_lingering(self, overdue: float) -> list[Request]:
        """The lingering requests whose final seats were due back by ``overdue``."""
        return [
            request
            for state in self.levels.values()
            for request in state.queue_set.overdue_lingering(overdue)
        ]

    @property
    def waiting_requests(self) -> int:
        """Requests waiting in any queue."""
        return sum(state.queue_set.requests_waiting for state in self.levels.values())

    def _record_drop(self, request: Request, now: float) -> None:
        """Record a drop for Retry-After (kept on the request) and for who is flooding."""
        level = request.level
        level.rejected_flows.record(request.flow_schema, request.distinguisher, now)
        self.tracker.record_dropped(level.name, int(now // 1))
        request.retry_after = self.tracker.retry_after(level.name)

    def _limits(self) -> dict[str, int]:
        return {name: state.queue_set.concurrency_limit for name, state in self.levels.items()}

    @staticmethod
    def _count_dispatched(dispatched: Iterable[Request], arrival: Request | None = None) -> None:
        for request in dispatched:
            counters = request.counters
            counters.dispatched += 1
            counters.executing += 1
            if request is not arrival:
                counters.waiting -= 1

    def _settled(self, level: RequestLevel, dispatched: Sequence[Request], now: float) -> Effects:
        """After a request left ``level``: drop the level if it was quiescing and is now idle."""
        if not (level.quiescing and level.is_drained) or self.levels.get(level.name) is not level:
            # Not quiescing, still busy, or already dropped (a request that lingered past the
            # drop released its final seats).
            return Effects(dispatched) if dispatched else NO_EFFECTS
        # A drained quiescing level is dropped by a fresh digest of the same configuration, as
        # Kubernetes re-queues a full config sync; shares and limits are recomputed without it.
        limits = self._limits()
        result = list(dispatched)
        result.extend(self._apply(self.config, now, None))
        removed = sorted(set(limits) - set(self.levels))
        return Effects(result, limit_changes(limits, self._limits()), removed)

    def statistics(self) -> LimiterStatistics:
        """Return a frozen snapshot of every level and flow schema."""
        levels: dict[str, PriorityLevelStatistics] = {
            name: state.statistics() for name, state in self.levels.items()
        }
        schemas: dict[str, FlowSchemaStatistics] = {
            schema.name: self.flow_schema_counters[schema.name].statistics(schema)
            for schema in self.classifier.flow_schemas
        }
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

    def dump(self, now: float | None = None, *, waiting: bool = True) -> EngineDump:
        """Copy every level, queue and request into an :class:`EngineDump` (a pure read).

        Each level dumps itself and its queue set (as upstream's ``QueueSet.Dump``).

        Args:
            now: The current time, which says which rejections are in the last minute
                (``LevelDump.rejected_flows``); ``None`` leaves those out.
            waiting: ``False`` copies no waiting request: each level's ``waiting_summary``
                counts them instead (what the metrics read, at a cost independent of the
                queues' depth).
        """
        statistics = self.statistics()
        levels = statistics.priority_levels
        return EngineDump(
            statistics,
            tuple(
                state.dump(levels[name], now, waiting) for name, state in list(self.levels.items())
            ),
        )
