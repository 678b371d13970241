"""The "uniform scenario" harness of the Kubernetes queue-set tests, in fake time.

Each client has threads; each thread issues calls with the client's hash and work estimate.
A call that starts executing schedules the thread's next call ``exec + think`` after its
start, runs for ``exec`` (a fake sleep) and finishes. A rejected call ends its thread. The
measured value per client is the time-average of initial seats executing, over the
evaluation window (or its two halves for split clients). Everything runs as asyncio tasks
driven by :class:`FakeClock`, against the sans-IO :class:`QueueSet` with a thin driver that
plays the role of the shell (waking dispatched waiters, releasing seats after padding).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from apf_limiter._clock import new_waiter
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import Request, RequestState
from apf_limiter.testing import FakeClock

NS = 1_000_000_000


@dataclass(frozen=True)
class Client:
    hash: int
    threads: int
    calls: int
    exec_ns: int
    think_ns: int
    seats: int = 1
    final_seats: int = 0
    pad_ns: int = 0
    split: bool = False


class ExactIntegrator:
    """Integrates an integer value over integer-nanosecond time, exactly."""

    def __init__(self, now_ns: int) -> None:
        self.last = now_ns
        self.x = 0
        self.duration = 0
        self.integral = 0
        self.integral_sq = 0

    def add(self, delta: int, now_ns: int) -> None:
        dt = now_ns - self.last
        self.duration += dt
        self.integral += self.x * dt
        self.integral_sq += self.x * self.x * dt
        self.last = now_ns
        self.x += delta

    def reset(self, now_ns: int) -> float:
        self.add(0, now_ns)
        average = self.integral / self.duration if self.duration else 0.0
        self.duration = self.integral = self.integral_sq = 0
        return average


def fair_alloc(demands: Sequence[float], capacity: float) -> list[float]:
    """Max-min fair allocation of ``capacity`` to ``demands`` (water filling)."""
    result = [0.0] * len(demands)
    remaining = capacity
    pending = sorted(range(len(demands)), key=lambda i: demands[i])
    while pending:
        share = remaining / len(pending)
        index = pending[0]
        if demands[index] <= share:
            result[index] = demands[index]
            remaining -= demands[index]
            pending.pop(0)
        else:
            for index in pending:
                result[index] = share
            break
    return result


@dataclass
class Scenario:
    name: str
    queues: int
    queue_length_limit: int
    hand_size: int
    concurrency_limit: int
    clients: Sequence[Client]
    eval_ns: int
    expected_averages: Sequence[Sequence[float]] | None = None
    expect_fair: Sequence[bool] = (True,)
    margins: Sequence[float] = (0.0,)
    expect_all_requests: bool = True
    expected_epoch_advances: int = 0
    # outputs
    executions: list[int] = field(default_factory=list)
    rejections: list[int] = field(default_factory=list)
    reject_reasons: set[str] = field(default_factory=set)
    report: list[str] = field(default_factory=list)


class Driver:
    """What the shell does for a queue set: wake dispatched waiters, release after padding."""

    def __init__(self, queue_set: QueueSet, clock: FakeClock) -> None:
        self.qs = queue_set
        self.clock = clock
        self.demand = ExactIntegrator(clock.now_ns())

    def note_demand(self) -> None:
        self.demand.add(self.qs.seat_demand - self.demand.x, self.clock.now_ns())

    def wake(self, dispatched: Sequence[Request]) -> None:
        for request in dispatched:
            if request.handle is not None:
                request.handle.set()

    async def start(self, request: Request) -> bool:
        dispatched = self.qs.start_request(request, self.clock.now())
        self.note_demand()
        self.wake(dispatched)
        if request.state is RequestState.WAITING:
            request.handle = new_waiter()
            await request.handle.wait()
        return request.state is RequestState.EXECUTING

    def finish(self, request: Request) -> None:
        dispatched = self.qs.finish(request, self.clock.now())
        self.note_demand()
        if request.state is RequestState.LINGERING:
            self.clock.call_later(request.additional_latency, lambda: self.release(request))
        self.wake(dispatched)

    def release(self, request: Request) -> None:
        dispatched = self.qs.release(request, self.clock.now())
        self.note_demand()
        self.wake(dispatched)


async def run(scenario: Scenario) -> list[list[float]]:
    """Run a scenario; return the measured averages per evaluation (1 or 2 of them)."""
    clock = FakeClock()
    queue_set = QueueSet(
        scenario.name,
        desired_num_queues=scenario.queues,
        queue_length_limit=scenario.queue_length_limit,
        hand_size=scenario.hand_size,
        concurrency_limit=scenario.concurrency_limit,
        now=clock.now(),
    )
    driver = Driver(queue_set, clock)
    check = ExactIntegrator(clock.now_ns())
    seat_integrators = [ExactIntegrator(0) for _ in scenario.clients]
    scenario.executions = [0] * len(scenario.clients)
    scenario.rejections = [0] * len(scenario.clients)
    tasks: set[asyncio.Task[None]] = set()
    split = any(c.split for c in scenario.clients)

    def spawn(i: int, client: Client, calls: int, k: int) -> None:
        task = asyncio.get_running_loop().create_task(call(i, client, calls, k))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def call(i: int, client: Client, calls: int, k: int) -> None:
        if k >= calls:
            return
        width = max(client.seats, client.final_seats)
        check.add(width, clock.now_ns())
        request = Request(
            f"client{i}",
            scenario.name,
            flow_hash=client.hash,
            initial_seats=client.seats,
            final_seats=client.final_seats,
            additional_latency=client.pad_ns / NS,
        )
        if not await driver.start(request):
            scenario.rejections[i] += 1
            scenario.reject_reasons.add(request.reject_reason)
            check.add(-width, clock.now_ns())
            return
        scenario.executions[i] += 1
        seat_integrators[i].add(client.seats, clock.now_ns())
        clock.call_later(
            (client.exec_ns + client.think_ns) / NS, lambda: spawn(i, client, calls, k + 1)
        )
        await clock.sleep(client.exec_ns / NS)
        seat_integrators[i].add(-client.seats, clock.now_ns())
        clock.call_later(client.pad_ns / NS, lambda: check.add(-width, clock.now_ns()))
        driver.finish(request)

    for i, client in enumerate(scenario.clients):
        for j in range(client.threads):
            delay = 90 * j + 20 * i
            calls = client.calls
            if client.split and j >= client.threads // 2:
                delay += scenario.eval_ns // 2
                calls = calls // 2
            clock.call_later(delay / NS, functools.partial(spawn, i, client, calls, 0))

    results: list[list[float]] = []
    ends = [scenario.eval_ns // 2, scenario.eval_ns] if split else [scenario.eval_ns]
    for end in ends:
        await clock.advance_to(end / NS)
        results.append([integrator.reset(clock.now_ns()) for integrator in seat_integrators])
    await clock.run_until_idle()
    assert not tasks, "every call must have ended"
    assert queue_set.requests_waiting == 0
    assert queue_set.requests_executing == 0
    assert queue_set.seats_in_use == 0
    # The queue set's seat demand agrees with an independent count, at every moment.
    now_ns = clock.now_ns()
    driver.demand.add(0, now_ns)
    check.add(0, now_ns)
    assert (driver.demand.duration, driver.demand.integral, driver.demand.integral_sq) == (
        check.duration,
        check.integral,
        check.integral_sq,
    )
    scenario.report.append(f"epoch advances: {queue_set.epoch_advances}")
    assert queue_set.epoch_advances == scenario.expected_epoch_advances
    assert queue_set.epoch_advance_failures == 0
    if scenario.expect_all_requests:
        assert sum(scenario.rejections) == 0, scenario.rejections
    return results


def expected_averages(scenario: Scenario, last: bool) -> list[float]:
    demands = []
    for client in scenario.clients:
        threads = client.threads // 2 if client.split and not last else client.threads
        demands.append(threads * client.seats * client.exec_ns / (client.think_ns + client.exec_ns))
    return fair_alloc(demands, scenario.concurrency_limit)


def check_fairness(scenario: Scenario, measured: list[list[float]]) -> list[str]:
    """Return the failures of the Kubernetes pass criterion (empty when it passes)."""
    failures = []
    for phase, averages in enumerate(measured):
        last = phase == len(measured) - 1
        if scenario.expected_averages is not None:
            expected = list(scenario.expected_averages[phase])
        else:
            expected = expected_averages(scenario, last)
        expect_fair = scenario.expect_fair[min(phase, len(scenario.expect_fair) - 1)]
        margin = scenario.margins[min(phase, len(scenario.margins) - 1)]
        for i, (got, want) in enumerate(zip(averages, expected, strict=True)):
            fair = abs((got - want) / want) <= margin if want > 0 else abs(got) <= margin
            if fair != expect_fair:
                failures.append(
                    f"{scenario.name} phase {phase} client {i}: average {got!r}, expected "
                    f"{want!r}, margin {margin}, expect_fair={expect_fair}"
                )
    return failures
