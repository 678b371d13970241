"""The discrete-event loop: requests through the real engine, the shell's timers as events.

It drives :class:`~apf_limiter.engine._controller.Controller` through its entry points, each
given ``now`` and answering :class:`~apf_limiter.engine._effects.Effects`, and does with them
what the shell does (``limiter/_core.py``, ``limiter/_adjustments.py``):

* an arrival first runs the borrowing adjustments that fell due (the shell's catch-up), then
  ``start``; a request left waiting at a level whose limit is 0 gets ``open_level`` (D5), then a
  wait-limit event ``requestWaitLimit`` later and, while anything waits, a borrowing event at
  the next due adjustment;
* a dispatched request runs for its service time from its dispatch (``start_time``), then
  ``finish``; one with an additional latency is ``release``-d that much later;
* a wait limit that passes runs the adjustments due (one may dispatch the request), then
  ``cancel(timed_out=True)``.

Time is kept in integer nanoseconds, as :class:`~apf_limiter.testing.FakeClock` keeps it, and
events at the same nanosecond run in the order they were scheduled.
"""

from __future__ import annotations

import heapq
import itertools
import math
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from apf_limiter._simulate._sources import Job, Source
from apf_limiter.config._model import Configuration
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._effects import NO_EFFECTS, Effects
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.engine._statistics import LimiterStatistics

_EXECUTING: Final = RequestState.EXECUTING
_WAITING: Final = RequestState.WAITING
_LINGERING: Final = RequestState.LINGERING

_ARRIVAL: Final = 0
_FINISH: Final = 1
_WAIT_LIMIT: Final = 2
_RELEASE: Final = 3
_TICK: Final = 4
_MAX_REPLAYED_ADJUSTMENTS: Final = 1000  # as limiter/_adjustments.py (catch_up)


@dataclass
class Tally:
    """What happened to the requests of one flow at one flow schema and priority level."""

    served: int = 0
    waits: array[float] = field(default_factory=lambda: array("d"))
    rejected: dict[str, int] = field(default_factory=dict)
    retry_after: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class HeavyFlow:
    """One engine flow (flow schema and distinguisher): its requests and their fate."""

    served: int = 0
    rejected: int = 0
    wait_sum: float = 0.0


@dataclass(frozen=True)
class Sample:
    """The levels' seat limits at one borrowing adjustment.

    ``levels`` maps each level's name to its limit, executing seats and waiting seats.
    """

    at: float
    levels: dict[str, tuple[int, int, int]]


@dataclass
class Outcome:
    """One request's fate: its queue wait when it ran, or why it was rejected and Retry-After."""

    wait: float | None = None
    reason: str | None = None
    retry_after: int | None = None
    flow_schema: str = ""
    priority_level: str = ""


@dataclass
class RunResult:
    """Everything a run gathered."""

    tallies: dict[tuple[str, str, str], Tally]
    flows: dict[tuple[str, str], HeavyFlow]
    samples: list[Sample]
    statistics: LimiterStatistics
    end: float
    events: int
    outcomes: list[Outcome] | None


class Simulation:
    """One configuration, one traffic, in fake time.

    Args:
        config: A loaded configuration.
        hash_seed: Seed of the engine's flow hash (the same seed, the same shuffle sharding).
        sample_period: Seconds between borrowing samples (at least the borrowing period).
        record: Keep each request's outcome, in the order of the tags its sources gave.
    """

    def __init__(
        self,
        config: Configuration,
        *,
        hash_seed: int = 0,
        sample_period: float | None = None,
        record: int = 0,
    ) -> None:
        self.config = config
        self.controller = Controller(config, hash_seed=hash_seed, now=0.0)
        self.period = config.borrowing_period
        self.next_adjustment = self.period
        self.wait_ns = round(config.request_wait_limit * 1e9)
        self.sample_period = max(sample_period or self.period, self.period)
        self.next_sample = 0.0
        # Events: (time ns, sequence, kind, object); the sequence orders events of one
        # nanosecond as they were scheduled.
        self.heap: list[tuple[int, int, int, Any]] = []
        self.wait_limits: deque[tuple[int, int, Request]] = deque()
        self._sequence = itertools.count(1)
        self.tick_pending = False
        self.executing = 0
        self.tallies: dict[tuple[str, str, str], Tally] = {}
        self.flows: dict[tuple[str, str], HeavyFlow] = {}
        # Both records of a request, by (scenario flow, flow schema, distinguisher): one
        # lookup per request instead of two (a flow schema has one priority level).
        self._targets: dict[tuple[str, str, str], tuple[Tally, HeavyFlow]] = {}
        self.samples: list[Sample] = []
        self.outcomes: list[Outcome] | None = [Outcome() for _ in range(record)] if record else None
        self.events = 0
        self._sample(0.0)

    # ----------------------------------------------------------------------------------------
    # the loop

    def run(self, sources: Iterable[Source]) -> RunResult:
        """Run every source's arrivals, then until every request has ended."""
        heap = self.heap
        sequence = self._sequence
        heappush = heapq.heappush
        heappop = heapq.heappop
        for source in sources:
            first = source.first()
            if first >= 0:
                heappush(heap, (first, next(sequence), _ARRIVAL, source))
        controller = self.controller
        start = controller.start
        finish = controller.finish
        dispatched = self._dispatched
        # Wait limits all have the same length, so they fall due in the order they were set:
        # a FIFO instead of the heap, merged by (time, sequence) as one timer queue would be.
        wait_limits = self.wait_limits
        wait_ns = self.wait_ns
        targets = self._targets
        # Recording outcomes takes every request through _dispatched (tests compare both).
        inline = self.outcomes is None
        next_adjustment = self.next_adjustment
        events = 0
        now_ns = 0
        obj: Any
        while heap or wait_limits:
            if wait_limits and (not heap or wait_limits[0] < heap[0]):
                now_ns, _, obj = wait_limits.popleft()
                kind = _WAIT_LIMIT
                if obj.state is not _WAITING:
                    continue  # dispatched meanwhile: its timer would have been cancelled
            else:
                now_ns, _, kind, obj = heappop(heap)
            events += 1
            now = now_ns / 1e9
            if now >= next_adjustment:
                self._catch_up(now)
                next_adjustment = self.next_adjustment
            if kind == _ARRIVAL:
                job = obj.take(now_ns)
                following = obj.next_ns
                if following >= 0:
                    heappush(heap, (following, next(sequence), _ARRIVAL, obj))
                request, effects = start(job.digest, now)
                request.handle = job
                if effects is not NO_EFFECTS:
                    for other in effects.dispatched:
                        dispatched(other, now_ns)
                state = request.state
                if state is _EXECUTING:
                    # At once (the fast path): no wait, no heavy-flow wait sum to add.
                    target = targets.get((job.flow, request.flow_schema, request.distinguisher))
                    if target is None or not inline or job.per_request:
                        dispatched(request, now_ns)
                        continue
                    tally, flow = target
                    tally.served += 1
                    tally.waits.append(0.0)
                    flow.served += 1
                    self.executing += 1
                    heappush(
                        heap,
                        (now_ns + round(job.service * 1e9), next(sequence), _FINISH, request),
                    )
                elif state is _WAITING:
                    opened = controller.open_level(request, now)
                    if opened is not NO_EFFECTS:
                        self._settle(opened, now_ns)
                    if request.state is _WAITING:
                        wait_limits.append((now_ns + wait_ns, next(sequence), request))
                        if not self.tick_pending:
                            self._arm_tick()
                else:
                    self._ended(request, now_ns, request.retry_after)
            elif kind == _FINISH:
                request = obj
                self.executing -= 1
                effects = finish(request, now)
                if request.state is _LINGERING:
                    heappush(
                        heap,
                        (
                            now_ns + request.additional_latency_ns,
                            next(sequence),
                            _RELEASE,
                            request,
                        ),
                    )
                if effects is not NO_EFFECTS:
                    for other in effects.dispatched:
                        dispatched(other, now_ns)
                if request.handle.source is not None:
                    self._client_next(request.handle, now_ns)
            elif kind == _WAIT_LIMIT:
                request = obj
                self._settle(controller.cancel(request, now, timed_out=True), now_ns)
                self._ended(request, now_ns, request.retry_after)
            elif kind == _RELEASE:
                request = obj
                if request.state is _LINGERING:
                    self._settle(controller.release(request, now), now_ns)
            else:  # the borrowing timer (while requests wait)
                self.tick_pending = False
                self._catch_up(now)
                next_adjustment = self.next_adjustment
                if controller.waiting_requests:
                    self._arm_tick()
        self.events = events
        return RunResult(
            self.tallies,
            self.flows,
            self.samples,
            controller.statistics(),
            now_ns / 1e9,
            events,
            self.outcomes,
        )

    def _push(self, when: int, kind: int, obj: object) -> None:
        heapq.heappush(self.heap, (when, next(self._sequence), kind, obj))

    def _arm_tick(self) -> None:
        self.tick_pending = True
        self._push(math.ceil(self.next_adjustment * 1e9), _TICK, None)

    # ----------------------------------------------------------------------------------------
    # acting on effects

    def _settle(self, effects: Effects, now_ns: int) -> None:
        if effects.dispatched:
            self._wake(effects.dispatched, now_ns)

    def _wake(self, dispatched: Iterable[Request], now_ns: int) -> None:
        for request in dispatched:
            self._dispatched(request, now_ns)

    def _target(self, job: Job, request: Request) -> tuple[Tally, HeavyFlow]:
        """The records of a request's scenario flow and engine flow (made at its first)."""
        key = (job.flow, request.flow_schema, request.distinguisher)
        target = self._targets.get(key)
        if target is None:
            tally_key = (job.flow, request.flow_schema, request.priority_level)
            tally = self.tallies.get(tally_key)
            if tally is None:
                tally = self.tallies[tally_key] = Tally()
            flow_key = (request.flow_schema, request.distinguisher)
            flow = self.flows.get(flow_key)
            if flow is None:
                flow = self.flows[flow_key] = HeavyFlow()
            target = self._targets[key] = (tally, flow)
        return target

    def _dispatched(self, request: Request, now_ns: int) -> None:
        """A request got its seats: record its wait, and schedule its end."""
        job: Job = request.handle
        wait = request.start_time - request.arrival_time
        if wait < 0.0:
            wait = 0.0
        target = self._targets.get((job.flow, request.flow_schema, request.distinguisher))
        tally, flow = target if target is not None else self._target(job, request)
        tally.served += 1
        tally.waits.append(wait)
        flow.served += 1
        flow.wait_sum += wait
        service = job.service
        if job.per_request:
            service *= 1.0 + job.per_request * self.executing
        self.executing += 1
        outcomes = self.outcomes
        if outcomes is not None and job.tag >= 0:
            outcomes[job.tag] = Outcome(
                wait, None, None, request.flow_schema, request.priority_level
            )
        # It runs from its dispatch (start_time), never before the event that woke it.
        start_ns = round(request.start_time * 1e9)
        if start_ns < now_ns:
            start_ns = now_ns
        heapq.heappush(
            self.heap, (start_ns + round(service * 1e9), next(self._sequence), _FINISH, request)
        )

    def _ended(self, request: Request, now_ns: int, retry_after: int) -> None:
        """A request was rejected on arrival or timed out in its queue."""
        job: Job = request.handle
        reason = request.reject_reason
        tally, flow = self._target(job, request)
        tally.rejected[reason] = tally.rejected.get(reason, 0) + 1
        pair = (reason, retry_after)
        tally.retry_after[pair] = tally.retry_after.get(pair, 0) + 1
        flow.rejected += 1
        outcomes = self.outcomes
        if outcomes is not None and job.tag >= 0:
            outcomes[job.tag] = Outcome(
                None, reason, retry_after, request.flow_schema, request.priority_level
            )
        self._client_next(job, now_ns)

    def _client_next(self, job: Job, now_ns: int) -> None:
        source = job.source
        if source is not None:
            following = source.ended(now_ns)
            if following >= 0:
                self._push(following, _ARRIVAL, source)

    # ----------------------------------------------------------------------------------------
    # borrowing: the shell's catch-up (limiter/_adjustments.py, Adjustments.catch_up)

    def _catch_up(self, now: float) -> None:
        replayed = 0
        period = self.period
        while True:
            due = self.next_adjustment
            if due > now:
                break
            if replayed >= _MAX_REPLAYED_ADJUSTMENTS:
                # A long idle stretch: resume on the grid, as the shell does.
                self.next_adjustment = due + period * math.ceil((now - due) / period + 1e-9)
                self._adjust(now)
                break
            self.next_adjustment = due + period
            # Nothing changed since the last event: adjusting at the due time is exact.
            self._adjust(due)
            replayed += 1

    def _adjust(self, at: float) -> None:
        effects = self.controller.adjust_borrowing(at)
        if effects.dispatched:
            self._wake(effects.dispatched, math.ceil(at * 1e9))
        if at >= self.next_sample:
            self._sample(at)

    def _sample(self, at: float) -> None:
        self.next_sample = at + self.sample_period
        levels = self.controller.statistics().priority_levels
        self.samples.append(
            Sample(
                at,
                {
                    name: (level.current_limit, level.executing_seats, level.waiting_seats)
                    for name, level in levels.items()
                },
            )
        )
