"""Fairness under overload in fake time: the real ``Limiter`` against a FIFO semaphore.

Everything runs on one :class:`~apf_limiter.testing.FakeClock`, so a minute of overload takes
well under a second and every figure is exact and repeatable. A scenario has *closed-loop*
flows (each keeps ``concurrency`` requests in flight: an elephant, or equal backlogged flows)
and *open-loop* flows (mice: Poisson arrivals, each request on its own). Service times and
arrival times are drawn from per-flow seeded streams, so the APF run and the FIFO run of one
scenario see exactly the same requests.

The gates compared:

* ``apf`` — :class:`~apf_limiter.Limiter` with one ``Queue`` level of ``capacity`` seats,
  fair per user (each flow is a user), Kubernetes' default queuing (64 queues, hand size 6,
  50 requests per queue).
* ``fifo`` — an :class:`asyncio.Semaphore` of the same capacity: one FIFO line, what most
  services use.

The figures (:func:`summarize`): the mice's wait percentiles, the utilization of the seats
while any request waits (work conservation), and Jain's fairness index of the service the
closed-loop flows got.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Protocol

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from benchmarks.engine_bench import level_config

__all__ = [
    "Gate",
    "Record",
    "Scenario",
    "Summary",
    "jain_index",
    "percentile",
    "simulate",
    "summarize",
    "utilization_while_backlogged",
    "ELEPHANT_VS_MICE",
    "EQUAL_FLOWS",
    "UNEQUAL_FLOWS",
]

Gate = Literal["apf", "fifo"]
ServiceShape = Literal["uniform", "fixed"]

_REJECTED_RETRY_PAUSE = 0.2


class _Held(Protocol):
    """What a gate's ``hold(flow)`` returns: ``async with`` holds a seat."""

    def __aenter__(self) -> Awaitable[object]: ...

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> Awaitable[object]: ...


_Hold = Callable[[str], _Held]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One overload scenario.

    Attributes:
        capacity: Seats (APF) or semaphore slots (FIFO).
        service_time: Mean seconds a request holds its seat.
        service_shape: ``uniform`` (between half and 1.5 times the mean) or ``fixed``.
        closed_loop: Requests each closed-loop flow keeps in flight, one entry per flow
            (``closed-0``, ``closed-1``, ...): an elephant, or backlogged flows.
        mice: Number of open-loop flows.
        mouse_rate: Requests per second of each mouse (Poisson arrivals).
        duration: Fake seconds simulated.
        warmup: Fake seconds at the start that are not counted.
        queues: APF queues of the level.
        hand_size: APF hand size.
        queue_length_limit: APF requests per queue.
        seed: Seed of the arrival and service streams and of the flow hash.
    """

    capacity: int = 8
    service_time: float = 0.1
    service_shape: ServiceShape = "uniform"
    closed_loop: tuple[int, ...] = (64,)
    mice: int = 10
    mouse_rate: float = 2.0
    duration: float = 60.0
    warmup: float = 5.0
    queues: int = 64
    hand_size: int = 6
    queue_length_limit: int = 50
    seed: int = 1


#: One elephant (64 in flight) against 10 mice (2 requests/s each), 8 seats, ~100 ms service.
ELEPHANT_VS_MICE = Scenario()
#: Ten equal flows, each always backlogged (16 in flight), 8 seats.
EQUAL_FLOWS = Scenario(closed_loop=(16,) * 10, mice=0)
#: Five backlogged flows of unequal demand (4 to 64 in flight), 8 seats: FIFO serves them in
#: proportion to their demand, fair queuing equally.
UNEQUAL_FLOWS = Scenario(closed_loop=(4, 8, 16, 32, 64), mice=0)


@dataclass(slots=True)
class Record:
    """One request's life in fake seconds (``start``/``end`` are ``None`` if it never got so far).

    Attributes:
        flow: The flow (user) name: ``closed-<n>`` or ``mouse-<n>``.
        arrival: When the request arrived.
        start: When it got its seat.
        end: When it gave the seat back.
        rejected: Whether APF rejected it (queue full or wait limit).
    """

    flow: str
    arrival: float
    start: float | None = None
    end: float | None = None
    rejected: bool = False

    @property
    def is_mouse(self) -> bool:
        """Whether the request came from an open-loop flow."""
        return self.flow.startswith("mouse")


@dataclass(frozen=True, slots=True)
class Summary:
    """The figures of one run, counted over ``[warmup, duration)``.

    Attributes:
        gate: ``apf`` or ``fifo``.
        mice_served: Mice requests that got a seat.
        mice_waits: Seconds each counted mouse request waited, in arrival order.
        mice_p50: Median mouse wait.
        mice_p99: 99th percentile mouse wait.
        utilization: Seat utilization while at least one request waited.
        backlogged_fraction: Fraction of the counted time with at least one request waiting.
        service_by_flow: Seat-seconds each closed-loop flow was served.
        completed_by_flow: Requests each closed-loop flow completed.
        jain_service: Jain's index of ``service_by_flow``.
        jain_completed: Jain's index of ``completed_by_flow``.
        rejected: Requests rejected (APF only).
    """

    gate: Gate
    mice_served: int
    mice_waits: list[float]
    mice_p50: float
    mice_p99: float
    utilization: float
    backlogged_fraction: float
    service_by_flow: dict[str, float]
    completed_by_flow: dict[str, int]
    jain_service: float
    jain_completed: float
    rejected: int


@dataclass(slots=True)
class _Run:
    scenario: Scenario
    clock: FakeClock
    hold: _Hold
    records: list[Record] = field(default_factory=list)

    def service(self, stream: random.Random) -> float:
        mean = self.scenario.service_time
        if self.scenario.service_shape == "fixed":
            return mean
        return stream.uniform(0.5 * mean, 1.5 * mean)

    async def request(self, flow: str, service: float) -> bool:
        """Run one request; returns whether it was rejected."""
        record = Record(flow, self.clock.now())
        self.records.append(record)
        try:
            async with self.hold(flow):
                record.start = self.clock.now()
                await self.clock.sleep(service)
        except Rejected:
            record.rejected = True
            return True
        record.end = self.clock.now()
        return False

    async def closed_loop(self, flow: str, stream: random.Random) -> None:
        while True:
            if await self.request(flow, self.service(stream)):
                await self.clock.sleep(_REJECTED_RETRY_PAUSE)

    async def open_loop(
        self, flow: str, stream: random.Random, spawned: set[asyncio.Task[bool]]
    ) -> None:
        rate = self.scenario.mouse_rate
        while True:
            await self.clock.sleep(stream.expovariate(rate))
            task = asyncio.create_task(self.request(flow, self.service(stream)))
            spawned.add(task)
            task.add_done_callback(spawned.discard)


def _apf_hold(scenario: Scenario, clock: FakeClock) -> tuple[Limiter, _Hold]:
    config = level_config(
        scenario.capacity, scenario.queues, scenario.hand_size, scenario.queue_length_limit
    )
    config["requestWaitLimit"] = 60
    limiter = Limiter(config, clock=clock, hash_seed=scenario.seed)
    digests: dict[str, RequestDigest] = {}

    def hold(flow: str) -> _Held:
        digest = digests.get(flow)
        if digest is None:
            digest = digests[flow] = RequestDigest(
                user=flow, groups=("system:authenticated",), path="/work"
            )
        return limiter.admit(digest)

    return limiter, hold


def _fifo_hold(capacity: int) -> _Hold:
    semaphore = asyncio.Semaphore(capacity)

    @asynccontextmanager
    async def hold(flow: str) -> AsyncIterator[None]:
        async with semaphore:
            yield

    return hold


async def _simulate(scenario: Scenario, gate: Gate) -> list[Record]:
    clock = FakeClock()
    limiter: Limiter | None = None
    if gate == "apf":
        limiter, hold = _apf_hold(scenario, clock)
    else:
        hold = _fifo_hold(scenario.capacity)
    run = _Run(scenario, clock, hold)
    spawned: set[asyncio.Task[bool]] = set()
    tasks: list[asyncio.Task[None]] = []
    for number, concurrency in enumerate(scenario.closed_loop):
        flow = f"closed-{number}"
        for slot in range(concurrency):
            stream = random.Random(f"{scenario.seed}/{flow}/{slot}")
            tasks.append(asyncio.create_task(run.closed_loop(flow, stream)))
    for number in range(scenario.mice):
        flow = f"mouse-{number}"
        stream = random.Random(f"{scenario.seed}/{flow}")
        tasks.append(asyncio.create_task(run.open_loop(flow, stream, spawned)))
    try:
        await clock.advance(scenario.duration)
    finally:
        everything = [*tasks, *spawned]
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)
        if limiter is not None:
            limiter.close()
    return run.records


def simulate(scenario: Scenario, gate: Gate) -> list[Record]:
    """Run ``scenario`` behind ``gate`` in fake time; returns every request's record."""
    return asyncio.run(_simulate(scenario, gate))


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``nan`` when there are none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: ``(Σx)² / (n·Σx²)``, 1 when all are equal, 1/n at worst."""
    total = sum(values)
    squares = sum(value * value for value in values)
    if not values or squares == 0:
        return math.nan
    return total * total / (len(values) * squares)


def utilization_while_backlogged(
    records: Sequence[Record], capacity: int, begin: float, end: float
) -> tuple[float, float]:
    """Seat utilization over the part of ``[begin, end)`` when at least one request waited.

    Exact: a sweep over every start, end, arrival and dispatch.

    Returns:
        ``(utilization, backlogged_fraction)``: busy seat-seconds over ``capacity`` times the
        backlogged seconds, and the fraction of ``[begin, end)`` that was backlogged.
    """
    events: list[tuple[float, int, int]] = []  # (time, change of executing, change of waiting)
    for record in records:
        left_queue = record.start if record.start is not None else end
        if record.rejected and record.start is None:
            left_queue = record.arrival  # rejected at once or after its wait: not backlog work
        events.append((record.arrival, 0, 1))
        events.append((left_queue, 0, -1))
        if record.start is not None:
            events.append((record.start, 1, 0))
            events.append((record.end if record.end is not None else end, -1, 0))
    events.sort()
    executing = waiting = 0
    busy = backlogged = 0.0
    previous = begin
    for when, d_executing, d_waiting in events:
        lo, hi = max(previous, begin), min(when, end)
        if hi > lo and waiting > 0:
            busy += executing * (hi - lo)
            backlogged += hi - lo
        previous = max(previous, when)
        executing += d_executing
        waiting += d_waiting
    if end > previous and waiting > 0:
        busy += executing * (end - max(previous, begin))
        backlogged += end - max(previous, begin)
    if backlogged == 0:
        return math.nan, 0.0
    return busy / (capacity * backlogged), backlogged / (end - begin)


def summarize(scenario: Scenario, gate: Gate, records: Sequence[Record]) -> Summary:
    """The figures of one run (see :class:`Summary`)."""
    begin, end = scenario.warmup, scenario.duration
    counted = [r for r in records if begin <= r.arrival < end]
    mice_waits = [r.start - r.arrival for r in counted if r.is_mouse and r.start is not None]
    service: dict[str, float] = {}
    completed: dict[str, int] = {}
    for number in range(len(scenario.closed_loop)):
        service[f"closed-{number}"] = 0.0
        completed[f"closed-{number}"] = 0
    for record in records:
        if record.is_mouse or record.start is None:
            continue
        # Service inside the window, whatever the request's arrival: what a flow was given.
        stop = record.end if record.end is not None else end
        served = min(stop, end) - max(record.start, begin)
        if served > 0:
            service[record.flow] += served
        if record.end is not None and begin <= record.end < end:
            completed[record.flow] += 1
    utilization, backlogged = utilization_while_backlogged(records, scenario.capacity, begin, end)
    return Summary(
        gate=gate,
        mice_served=len(mice_waits),
        mice_waits=mice_waits,
        mice_p50=percentile(mice_waits, 0.50),
        mice_p99=percentile(mice_waits, 0.99),
        utilization=utilization,
        backlogged_fraction=backlogged,
        service_by_flow=service,
        completed_by_flow=completed,
        jain_service=jain_index(list(service.values())) if service else math.nan,
        jain_completed=jain_index([float(c) for c in completed.values()])
        if completed
        else math.nan,
        rejected=sum(1 for r in counted if r.rejected),
    )
