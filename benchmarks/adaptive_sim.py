"""The adaptive server limit in fake time: a backend with a knee, and the limiter in front.

The backend is a processor-sharing server of capacity ``C``: each request needs its work
(seconds at full speed, ±10% seeded noise) and, with ``n`` requests in flight, each advances
at ``min(1, C / n)``: service time is constant up to ``C`` in flight and grows in proportion
beyond (a database, a CPU-bound pool). Its completions are timers on the same
:class:`~apf_limiter.testing.FakeClock` as the limiter, so a run is exact and repeatable.

The traffic is open-loop (Poisson arrivals, seeded) at ``load`` × the backend's throughput, to
two priority levels with different service times (``api``: short requests, ``reports``: four
times longer), so the limit must be learned from mixed traffic. A run records every request
and samples ServerCL every second.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock

__all__ = ["Backend", "Flow", "Result", "Run", "adaptive_config", "cv", "percentile", "simulate"]

#: The two kinds of requests: (level, work in seconds at full speed, share of arrivals).
MIXED: tuple[tuple[str, float, float], ...] = (("api", 0.05, 0.8), ("reports", 0.2, 0.2))


class Backend:
    """A processor-sharing server of ``capacity`` full-speed slots, on a fake clock."""

    def __init__(self, clock: FakeClock, capacity: float) -> None:
        self._clock = clock
        self.capacity = capacity
        self._served = 0.0  # service every request in flight has had (seconds at full speed)
        self._at = clock.now()
        self._jobs: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()
        self._timer: Any = None

    @property
    def in_flight(self) -> int:
        """Requests in the backend now."""
        return len(self._jobs)

    def _advance(self) -> None:
        now = self._clock.now()
        if self._jobs:
            self._served += (now - self._at) * min(1.0, self.capacity / len(self._jobs))
        self._at = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._jobs:
            rate = min(1.0, self.capacity / len(self._jobs))
            delay = max(0.0, (self._jobs[0][0] - self._served) / rate)
            self._timer = self._clock.call_later(delay, self._complete)

    def _complete(self) -> None:
        self._timer = None
        self._advance()
        while self._jobs and self._jobs[0][0] <= self._served + 1e-9:
            _, _, done = heapq.heappop(self._jobs)
            if not done.done():
                done.set_result(None)
        self._reschedule()

    async def run(self, work: float) -> None:
        """Serve a request needing ``work`` seconds at full speed."""
        self._advance()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._jobs, (self._served + work, next(self._sequence), done))
        self._reschedule()
        await done

    def set_capacity(self, capacity: float) -> None:
        """Change the capacity from now on."""
        self._advance()
        self.capacity = capacity
        self._reschedule()


@dataclass(frozen=True)
class Flow:
    """Open-loop traffic: requests per second over time, and what they are."""

    level: str
    work: float
    rate: float
    users: int = 20


@dataclass
class Result:
    """What one run recorded.

    ``limits`` samples ServerCL every second; ``probing`` holds the times of the samples taken
    while a probe held it low for a moment (the criteria judge the limit outside them),
    ``probes`` counts the probes of the run and ``probe_windows`` their spans (polled every
    10 ms); ``rejections`` holds each rejected request's (arrival, rejection) times.
    """

    duration: float
    completed: list[tuple[float, str, float, float]] = field(default_factory=list)
    rejected: int = 0
    limits: list[tuple[float, int]] = field(default_factory=list)
    probing: set[float] = field(default_factory=set)
    probes: int = 0
    probe_windows: list[tuple[float, float]] = field(default_factory=list)
    rejections: list[tuple[float, float]] = field(default_factory=list)

    def probe_rejections(self) -> int:
        """Rejected requests that arrived or waited while a probe held the limit low."""
        return sum(
            1
            for arrived, rejected in self.rejections
            if any(arrived <= end and start <= rejected for start, end in self.probe_windows)
        )

    def probe_cost(self, rate: Callable[[float], float]) -> float:
        """Throughput lost in probe windows, as a fraction of all completions.

        ``rate``: what the backend completes per second at a time when kept busy (what a
        window starting then would have completed without its probe).
        """
        lost = sum(
            max(0.0, rate(start) * (end - start) - len(self.window(start, end)))
            for start, end in self.probe_windows
        )
        return lost / max(1, len(self.completed))

    def window(self, start: float, end: float) -> list[tuple[float, str, float, float]]:
        """Completions (time, level, latency, execution time) in ``[start, end)``."""
        return [c for c in self.completed if start <= c[0] < end]

    def throughput(self, start: float, end: float) -> float:
        """Completed requests per second in ``[start, end)``."""
        return len(self.window(start, end)) / (end - start)

    def p99(self, start: float, end: float, *, execution: bool = False) -> float:
        """99th percentile latency (arrival to end), or execution time, in ``[start, end)``."""
        window = self.window(start, end)
        return percentile([c[3] if execution else c[2] for c in window], 0.99)

    def limits_between(self, start: float, end: float) -> list[int]:
        """ServerCL, sampled every second in ``[start, end)``, outside probes."""
        return [limit for t, limit in self.limits if start <= t < end and t not in self.probing]

    def p99_series(self, *, execution: bool = False) -> list[tuple[float, float]]:
        """Per whole second of the run with completions: (its start, the p99 of that second)."""
        seconds: dict[int, list[float]] = {}
        for at, _, latency, ran in self.completed:
            seconds.setdefault(int(at), []).append(ran if execution else latency)
        return [(float(s), percentile(values, 0.99)) for s, values in sorted(seconds.items())]


def adaptive_config(
    server_limit: int, adaptive: dict[str, Any] | None, wait_limit: float = 5.0
) -> dict[str, Any]:
    """Two levels (``api``, ``reports``) sharing the server evenly; ``adaptive`` turns it on."""

    def level(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "limited": {"nominalConcurrencyShares": 50, "lendablePercent": 50},
        }

    def schema(name: str, precedence: int) -> dict[str, Any]:
        return {
            "name": name,
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": name}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        }

    config: dict[str, Any] = {
        "serverConcurrencyLimit": server_limit,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [level("api"), level("reports")],
        "flowSchemas": [schema("api", 500), schema("reports", 600)],
    }
    if adaptive is not None:
        config["adaptiveConcurrency"] = adaptive
    return config


@dataclass(frozen=True)
class Run:
    """One simulated run.

    Attributes:
        capacity: The backend's knee ``C`` over time: ``(from time, C)`` steps.
        load: Offered load as a multiple of the backend's throughput at the first ``C``.
        duration: Simulated seconds.
        server_limit: ServerCL (the start, when adaptive).
        adaptive: The ``adaptiveConcurrency`` settings, or ``None`` for a static limit.
        seed: Seeds arrivals and noise (identical across runs with the same seed).
        elephant: Mice and an elephant instead of the mixed traffic: one user keeping this
            many ``api`` requests in flight, beside open-loop mice (each its own user) at
            ``load``; recorded as levels ``elephant`` and ``mouse``.
        fifo: A FIFO :class:`asyncio.Semaphore` of this many slots instead of the limiter.
        exponential: Each request's work drawn from an exponential distribution around its
            level's mean instead of ±10% around it (service times spread widely).
        clients: Closed-loop clients instead of the open-loop traffic: this many, each its own
            user, alternately at levels ``api`` and ``reports`` (both 50 ms ±10%: the levels
            are equally busy, so ServerCL is what runs), all arriving at time 0 (a restart
            under full load), each sending its next request as its last one ends (1 s after
            a rejection).
    """

    capacity: tuple[tuple[float, float], ...]
    load: float
    duration: float
    server_limit: int
    adaptive: dict[str, Any] | None = None
    seed: int = 1
    elephant: int = 0
    fifo: int = 0
    exponential: bool = False
    clients: int = 0


async def _simulate(run: Run) -> Result:
    clock = FakeClock()
    backend = Backend(clock, run.capacity[0][1])
    limiter = Limiter(
        adaptive_config(run.server_limit, run.adaptive), clock=clock, hash_seed=run.seed
    )
    result = Result(run.duration)
    mixed = MIXED if not run.elephant else (("mouse", MIXED[0][1], 1.0),)
    semaphore = asyncio.Semaphore(run.fifo) if run.fifo else None
    mean_work = sum(work * share for _, work, share in mixed)
    rate = run.load * run.capacity[0][1] / mean_work
    spawned: set[asyncio.Task[bool]] = set()
    stream = random.Random(run.seed)

    async def request(level: str, work: float, user: int) -> bool:
        arrived = clock.now()
        group = "api" if run.elephant else level
        digest = RequestDigest(user=f"{level}-{user}", groups=(group,), path="/work")
        try:
            if semaphore is not None:
                async with semaphore:
                    began = clock.now()
                    await backend.run(work)
            else:
                async with limiter.admit(digest):
                    began = clock.now()
                    await backend.run(work)
        except Rejected:
            result.rejected += 1
            result.rejections.append((arrived, clock.now()))
            return False
        now = clock.now()
        result.completed.append((now, level, now - arrived, now - began))
        return True

    async def arrivals() -> None:
        while True:
            await clock.sleep(stream.expovariate(rate))
            level, work = _pick(mixed, stream.random())
            noisy = work * (
                stream.expovariate(1.0) if run.exponential else stream.uniform(0.9, 1.1)
            )
            user = stream.randrange(1_000_000 if run.elephant else 20)
            task = asyncio.create_task(request(level, noisy, user))
            spawned.add(task)
            task.add_done_callback(spawned.discard)

    async def capacity_steps() -> None:
        for at, capacity in run.capacity[1:]:
            await clock.sleep(at - clock.now())
            backend.set_capacity(capacity)

    async def sample_limits() -> None:
        while True:
            now = clock.now()
            result.limits.append((now, limiter.statistics().server_concurrency_limit))
            adaptive = limiter.adaptive_concurrency
            if adaptive is not None and adaptive.probing:
                result.probing.add(now)
            await clock.sleep(1.0)

    async def watch_probes() -> None:
        began: float | None = None
        while True:
            adaptive = limiter.adaptive_concurrency
            probing = adaptive is not None and adaptive.probing
            if probing and began is None:
                began = clock.now()
            elif not probing and began is not None:
                result.probe_windows.append((began, clock.now()))
                began = None
            await clock.sleep(0.01)

    async def elephant(slot: int) -> None:
        noise = random.Random(f"{run.seed}/elephant/{slot}")
        while True:
            await request("elephant", MIXED[0][1] * noise.uniform(0.9, 1.1), 0)

    async def client(number: int) -> None:
        noise = random.Random(f"{run.seed}/client/{number}")
        while True:
            level = MIXED[number % 2][0]
            if not await request(level, MIXED[0][1] * noise.uniform(0.9, 1.1), number):
                await clock.sleep(1.0)

    sources = (
        (capacity_steps, sample_limits)
        if run.clients
        else (arrivals, capacity_steps, sample_limits)
    )
    tasks = [asyncio.create_task(f()) for f in sources]
    if run.adaptive is not None:
        tasks.append(asyncio.create_task(watch_probes()))
    tasks += [asyncio.create_task(elephant(slot)) for slot in range(run.elephant)]
    tasks += [asyncio.create_task(client(number)) for number in range(run.clients)]
    try:
        await clock.advance(run.duration)
    finally:
        adaptive = limiter.adaptive_concurrency
        result.probes = 0 if adaptive is None else adaptive.probes
        everything = [*tasks, *spawned]
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)
        limiter.close()
    return result


def _pick(kinds: Sequence[tuple[str, float, float]], pick: float) -> tuple[str, float]:
    """The kind of request (level, work) that ``pick`` (uniform in [0, 1)) falls on."""
    for level, work, share in kinds:
        pick -= share
        if pick < 0:
            return level, work
    return kinds[-1][0], kinds[-1][1]


def simulate(run: Run) -> Result:
    """Run ``run`` in fake time."""
    return asyncio.run(_simulate(run))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``values`` (nearest rank; 0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (population standard deviation over mean)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) / mean
