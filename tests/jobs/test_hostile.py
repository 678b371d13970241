"""A hostile retest of the jobs front door and the gate used directly by a job runner.

Thousands of short jobs against 2 seats, through every entry (``guard``, ``guarded``,
``guard(retry_for=...)``, ``admit_with_retry``, ``Gate.start`` with a deadline), with
cancellations at awkward points (a timer, ``asyncio.timeout``, a cancel delivered in the same
loop turn as the dispatch), jobs that raise or cancel themselves, reconfigurations and
``close()`` while jobs queue and run. After each run: every seat back, nothing waiting, and the
counts add up (every request that reached the limiter was dispatched, rejected or cancelled,
once).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from apf_limiter import Limiter, Rejected
from apf_limiter.gate import Gate, SlowClients
from apf_limiter.jobs import Job, admit_with_retry, guard, guarded
from apf_limiter.observability import Observer
from apf_limiter.testing import FakeClock
from tests.jobs.configs import jobs_config

pytestmark = pytest.mark.timeout(60)

ENTRIES = ("guard", "guarded", "retry", "admit_with_retry", "gate")
ENDINGS = ("return", "raise", "cancel_self")
CANCELS = ("none", "timer", "timeout", "victim_before_release", "victim_after_release")


class Tally(Observer):
    """Counts the limiter's events, to check them against its statistics."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        self.events["arrived"] += 1

    def request_dispatched(
        self, priority_level: str, flow_schema: str, queue_wait: float, exempt: bool
    ) -> None:
        self.events["dispatched"] += 1

    def request_rejected(
        self, priority_level: str, flow_schema: str, reason: Any, queue_wait: float, exempt: bool
    ) -> None:
        self.events[f"rejected:{reason}"] += 1

    def request_cancelled(self, priority_level: str, flow_schema: str, queue_wait: float) -> None:
        self.events["cancelled"] += 1

    def request_finished(
        self, priority_level: str, flow_schema: str, execution_time: float
    ) -> None:
        self.events["finished"] += 1


@dataclass(frozen=True)
class Plan:
    """One job of a run: when it comes, how it is admitted, how long it runs, how it ends."""

    arrival: int
    entry: str
    duration: int
    ending: str
    cancel: str
    cancel_at: int
    seats: int
    tenant: int


def plans(count: int, pick: random.Random) -> list[Plan]:
    """``count`` jobs on a coarse grid of whole seconds, so that events often coincide."""
    return [
        Plan(
            arrival=pick.randrange(0, count // 4 + 1),
            entry=pick.choice(ENTRIES),
            duration=pick.randrange(0, 4),
            ending=pick.choice(ENDINGS),
            cancel=pick.choice(CANCELS),
            cancel_at=pick.randrange(0, 5),
            seats=pick.choice((1, 1, 1, 2)),
            tenant=pick.randrange(4),
        )
        for _ in range(count)
    ]


async def run_jobs(
    jobs: list[Plan], pick: random.Random, *, reconfigure: bool, close_at: int | None
) -> tuple[Limiter, Tally, Gate, list[BaseException | None]]:
    """Run the jobs to the end in fake time; the limiter, its tally, the gate and the outcomes."""
    clock = FakeClock()
    tally = Tally()
    limiter = Limiter(
        jobs_config(limit=2, queues=2, hand_size=1, queue_length_limit=3, wait_limit=4),
        clock=clock,
        observer=tally,
    )
    gate = Gate(limiter, slow_clients=SlowClients(request_timeout=3.0))
    tasks: list[asyncio.Task[None]] = []
    outcomes: list[BaseException | None] = [None] * len(jobs)

    async def body(plan: Plan, index: int, victim: Callable[[], None]) -> None:
        await clock.sleep(plan.duration)
        if plan.cancel == "victim_before_release":
            victim()  # the cancel lands in the same loop turn as the dispatch our release makes
        if plan.ending == "raise":
            raise ValueError(f"job {index} failed")
        if plan.ending == "cancel_self":
            raise asyncio.CancelledError

    async def admit_and_run(plan: Plan, index: int, victim: Callable[[], None]) -> None:
        job = Job("report", tenant=f"t{plan.tenant}", seats=plan.seats)
        if plan.entry == "guard":
            async with guard(limiter, job):
                await body(plan, index, victim)
        elif plan.entry == "guarded":

            @guarded(limiter, "report", tenant=job.tenant, seats=plan.seats)
            async def run() -> None:
                await body(plan, index, victim)

            await run()
        elif plan.entry == "retry":
            async with guard(limiter, job, retry_for=6):
                await body(plan, index, victim)
        elif plan.entry == "admit_with_retry":
            admission = await admit_with_retry(limiter, job, retry_for=6, random=pick.random)
            try:
                await body(plan, index, victim)
            finally:
                admission.release()
        else:
            await run_through_gate(gate, job, lambda: body(plan, index, victim))
        if plan.cancel == "victim_after_release":
            victim()  # no await since the release: the same loop turn

    async def one(plan: Plan, index: int) -> None:
        await clock.sleep(plan.arrival)

        def victim() -> None:
            # Another job, likely the one our release dispatches: the next one in line.
            for other in tasks[index + 1 : index + 4]:
                if not other.done():
                    other.cancel()
                    return

        try:
            if plan.cancel == "timeout":
                async with asyncio.timeout(plan.cancel_at * 0.5):
                    await admit_and_run(plan, index, victim)
            else:
                await admit_and_run(plan, index, victim)
        except BaseException as error:  # the outcome is checked below
            outcomes[index] = error

    for index, plan in enumerate(jobs):
        task = asyncio.create_task(one(plan, index))
        tasks.append(task)
        if plan.cancel == "timer":
            clock.call_later(plan.arrival + plan.cancel_at * 0.5, cancel, task)
    if reconfigure:
        for when, limit in ((3, 1), (7, 3), (11, 2)):
            clock.call_later(when, limiter.reconfigure, jobs_config(limit=limit, queues=2))
    if close_at is not None:
        clock.call_later(close_at, limiter.close)
    await clock.run_until_idle()
    await asyncio.gather(*tasks, return_exceptions=True)
    for index, task in enumerate(tasks):
        if task.cancelled() and outcomes[index] is None:
            outcomes[index] = asyncio.CancelledError()
    return limiter, tally, gate, outcomes


def cancel(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` (a timer's callback)."""
    task.cancel()


async def run_through_gate(gate: Gate, job: Job, work: Callable[[], Awaitable[None]]) -> None:
    """A job runner's mapping onto the gate, as ``docs/gate.md`` writes it."""
    ticket = gate.start(job.digest)
    error: BaseException | None = None
    try:
        if not ticket.admitted:
            await ticket.wait()
        ticket.response_started()
        await work()
    except BaseException as exc:
        error = exc
    finally:
        expired = ticket.end(error)
    if expired:
        raise TimeoutError(f"expired: {ticket.reason}")
    if error is not None:
        raise error


def check_everything_came_back(
    limiter: Limiter, tally: Tally, outcomes: list[BaseException | None]
) -> None:
    """No seat held, nothing waiting, counts that add up, and only the outcomes a job can have."""
    statistics = limiter.statistics()
    level = statistics.priority_levels["jobs"]
    schema = statistics.flow_schemas["jobs"]
    held = (level.executing_requests, level.executing_seats, level.waiting_requests)
    assert held == (0, 0, 0), f"held after the run: {held}"
    assert (schema.executing_requests, schema.waiting_requests) == (0, 0)
    rejected = sum(level.rejected.values())
    arrived = tally.events["arrived"]
    assert level.dispatched + rejected + level.cancelled == arrived == schema.matched, (
        level,
        tally.events,
    )
    assert tally.events["dispatched"] == level.dispatched == tally.events["finished"]
    allowed = (Rejected, ValueError, asyncio.CancelledError, TimeoutError)
    for outcome in outcomes:
        assert outcome is None or isinstance(outcome, allowed), repr(outcome)


async def test_two_thousand_jobs_with_random_cancels_give_every_seat_back() -> None:
    pick = random.Random(31)
    jobs = plans(2000, pick)
    limiter, tally, _, outcomes = await run_jobs(jobs, pick, reconfigure=True, close_at=50)
    check_everything_came_back(limiter, tally, outcomes)
    kinds = Counter(type(outcome).__name__ for outcome in outcomes)
    # Every kind of ending happened, so every path was taken.
    assert set(kinds) >= {"NoneType", "Rejected", "ValueError", "CancelledError", "TimeoutError"}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    seed=hst.integers(0, 2**32 - 1),
    count=hst.integers(1, 60),
    reconfigure=hst.booleans(),
    close_at=hst.none() | hst.integers(0, 10),
)
def test_random_jobs_and_cancels_give_every_seat_back(
    seed: int, count: int, reconfigure: bool, close_at: int | None
) -> None:
    pick = random.Random(seed)
    jobs = plans(count, pick)

    async def main() -> None:
        limiter, tally, _, outcomes = await run_jobs(
            jobs, pick, reconfigure=reconfigure, close_at=close_at
        )
        check_everything_came_back(limiter, tally, outcomes)

    asyncio.run(main())


async def test_guarded_refuses_an_async_generator_function_by_name() -> None:
    # Before: "decorates async def functions" for a function declared async def.
    limiter = Limiter(jobs_config(), clock=FakeClock())

    async def pages() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match=r"async generator function .*async with guard"):
        guarded(limiter, "report")(pages)  # type: ignore[arg-type]


async def test_a_nested_guard_at_a_full_level_waits_out_its_wait_limit_then_lets_go() -> None:
    # A job that guards another job at its own level, all of whose seats it holds, cannot be
    # admitted until it lets go: the inner guard is rejected at its wait limit (a bounded
    # wait, not a deadlock), and every seat comes back.
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1, wait_limit=5), clock=clock)

    async def outer() -> None:
        async with guard(limiter, Job("report")), guard(limiter, Job("export")):
            pass

    task = asyncio.create_task(outer())
    await clock.run_until_idle()
    error = task.exception()
    assert isinstance(error, Rejected) and error.reason == "time-out"
    level = limiter.statistics().priority_levels["jobs"]
    assert (level.executing_requests, level.waiting_requests, level.timed_out) == (0, 0, 1)


async def test_real_time_stress_of_short_jobs_with_random_cancels() -> None:
    """Real clock, real tasks: 600 short jobs on 2 seats, about a third cancelled at random."""
    pick = random.Random(7)
    tally = Tally()
    limiter = Limiter(
        jobs_config(limit=2, queues=2, queue_length_limit=50, wait_limit=0.5), observer=tally
    )
    gate = Gate(limiter, slow_clients=SlowClients(request_timeout=0.2))
    tasks: list[asyncio.Task[None]] = []
    outcomes: Counter[str] = Counter()

    async def work() -> None:
        await asyncio.sleep(pick.choice((0, 0.001, 0.003, 0.005)))

    async def one(i: int) -> None:
        entry = ENTRIES[i % len(ENTRIES)]
        job = Job("report", tenant=f"t{i % 5}")
        try:
            async with asyncio.timeout(pick.choice((None, 0.01, 0.05))):
                if entry == "gate":
                    await run_through_gate(gate, job, work)
                elif entry == "admit_with_retry":
                    admission = await admit_with_retry(limiter, job, retry_for=0.5)
                    try:
                        await work()
                    finally:
                        admission.release()
                else:
                    async with guard(limiter, job, retry_for=0.5 if entry == "retry" else None):
                        await work()
            outcomes["ran"] += 1
        except (Rejected, TimeoutError, asyncio.CancelledError) as error:
            outcomes[type(error).__name__] += 1

    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(600):
        tasks.append(asyncio.create_task(one(i)))
        if i % 3 == 0:
            victim = tasks[-pick.randrange(1, min(10, len(tasks)) + 1)]  # a recent one
            loop.call_later(pick.random() * 0.005, victim.cancel)
        if i % 10 == 0:
            await asyncio.sleep(0.008)  # bursts of 10, above capacity: queues fill, drain
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    elapsed = loop.time() - started
    check_everything_came_back(limiter, tally, [])
    assert outcomes["ran"] > 100 and outcomes["CancelledError"] > 50, outcomes
    assert elapsed < 5, elapsed
    # The limiter still serves: a job runs at once.
    async with guard(limiter, Job("report")) as admission:
        assert admission.queue_wait == 0.0


async def test_wrong_arguments_are_refused_clearly_when_the_guard_is_made() -> None:
    # Before: a kind given as the job raised AttributeError from classification, and guarded()
    # took a bad wait limit or tenant silently, to fail on every call.
    limiter = Limiter(jobs_config(), clock=FakeClock())
    not_a_job: Any = "report"
    with pytest.raises(TypeError, match="job must be a Job or a RequestDigest, got 'report'"):
        guard(limiter, not_a_job)
    with pytest.raises(TypeError, match="job must be a Job or a RequestDigest"):
        await admit_with_retry(limiter, not_a_job, retry_for=1)
    with pytest.raises(TypeError, match="limiter must be a Limiter, got None"):
        guard(None, Job("report"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wait_limit must be between 0 and 60"):
        guard(limiter, Job("report"), wait_limit=-1)
    with pytest.raises(ValueError, match="wait_limit must be between 0 and 60"):
        guarded(limiter, "report", wait_limit=float("nan"))
    with pytest.raises(TypeError, match="tenant must be a string or a function"):
        guarded(limiter, "report", tenant=5)  # type: ignore[arg-type]
    level = limiter.statistics().priority_levels["jobs"]
    assert (level.executing_requests, level.waiting_requests, level.dispatched) == (0, 0, 0)


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_a_job_raising_a_base_exception_gives_its_seat_back(
    error: type[BaseException],
) -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1), clock=clock)

    queued: list[asyncio.Task[str]] = []

    @guarded(limiter, "report")
    async def fails() -> None:
        queued.append(asyncio.create_task(_one_job(limiter, clock)))
        await clock.advance(0)  # the other job queues behind this one
        assert limiter.statistics().priority_levels["jobs"].waiting_requests == 1
        raise error

    # Raised in this task, not in one of its own (asyncio re-raises those out of the loop).
    with pytest.raises(error):
        await fails()
    await clock.run_until_idle()
    assert queued[0].result() == "ran"  # the queued job got the seat
    level = limiter.statistics().priority_levels["jobs"]
    assert (level.executing_requests, level.waiting_requests) == (0, 0)


async def _one_job(limiter: Limiter, clock: FakeClock) -> str:
    async with guard(limiter, Job("report", tenant="b")):
        await clock.sleep(1)
    return "ran"
