"""admit_with_retry and guard(retry_for=...): retry after Retry-After up to a deadline, in
fake time."""

from __future__ import annotations

import asyncio
import random

import pytest

from apf_limiter import Admission, Limiter, Rejected
from apf_limiter.jobs import Job, admit_with_retry, guard
from apf_limiter.testing import FakeClock
from tests.jobs.configs import jobs_config

pytestmark = pytest.mark.timeout(30)


def _no_jitter() -> float:
    return 0.0


async def _hold(limiter: Limiter, clock: FakeClock, job: Job, seconds: float) -> None:
    async with guard(limiter, job):
        await clock.sleep(seconds)


async def test_a_rejected_job_is_retried_after_retry_after_and_admitted() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=2, reject=True), clock=clock)
    holders = [asyncio.create_task(_hold(limiter, clock, Job("report"), 2.5)) for _ in range(2)]
    await clock.advance(0)
    producer = asyncio.create_task(
        admit_with_retry(limiter, Job("export", tenant="acme"), retry_for=10, random=_no_jitter)
    )
    await clock.run_until_idle()
    admission = producer.result()
    # Rejected at 0, 1 and 2 (Retry-After 1 s each); the seats came back at 2.5; admitted at 3.
    assert clock.now() == 3.0
    assert (admission.flow_schema, admission.distinguisher) == ("jobs", "")
    statistics = limiter.statistics().priority_levels["jobs"]
    assert (statistics.executing_requests, statistics.rejected["concurrency-limit"]) == (1, 3)
    admission.release()
    await asyncio.gather(*holders)


async def test_a_burst_is_retried_until_every_job_ran_within_the_deadline() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=2, queue_length_limit=2, wait_limit=5), clock=clock)
    jitter = random.Random(3)
    admitted_at: list[float] = []

    async def produce(i: int) -> None:
        job = Job("report", tenant=f"t{i % 3}")
        async with guard(limiter, job, retry_for=60) as admission:
            assert isinstance(admission, Admission)
            admitted_at.append(clock.now())
            await clock.sleep(1)

    # guard(retry_for=) uses random.random: seed the module's generator through the helper.
    producers = [
        asyncio.create_task(
            _produce_with(limiter, clock, i, jitter.random, admitted_at) if i % 2 else produce(i)
        )
        for i in range(20)
    ]
    await clock.run_until_idle()
    assert all(task.done() and task.exception() is None for task in producers)
    assert len(admitted_at) == 20
    assert max(admitted_at) <= 60
    statistics = limiter.statistics().priority_levels["jobs"]
    assert statistics.rejected["queue-full"] > 0  # the burst did not fit: it was retried
    assert (statistics.executing_requests, statistics.waiting_requests) == (0, 0)


async def _produce_with(
    limiter: Limiter, clock: FakeClock, i: int, pick: object, admitted_at: list[float]
) -> None:
    assert callable(pick)
    admission = await admit_with_retry(
        limiter, Job("export", tenant=f"t{i % 3}"), retry_for=60, random=pick
    )
    try:
        admitted_at.append(clock.now())
        await clock.sleep(1)
    finally:
        admission.release()


async def test_the_last_rejection_is_raised_when_the_deadline_comes_first() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1, reject=True), clock=clock)
    holder = asyncio.create_task(_hold(limiter, clock, Job("report"), 100))
    await clock.advance(0)
    producer = asyncio.create_task(
        admit_with_retry(limiter, Job("export"), retry_for=3.5, random=_no_jitter)
    )
    await clock.advance(10)
    with pytest.raises(Rejected) as rejected:
        producer.result()
    # Tries at 0, 1, 2 and 3; the next would come at 4, after the deadline: raised at 3.
    assert rejected.value.reason == "concurrency-limit"
    assert rejected.value.retry_after == 1
    assert any("4 tries in 3.5s" in note for note in rejected.value.__notes__)
    statistics = limiter.statistics().priority_levels["jobs"]
    assert statistics.rejected["concurrency-limit"] == 4
    assert statistics.executing_requests == 1  # the holder's; the producer holds nothing
    holder.cancel()


async def test_the_queue_wait_is_cut_to_the_time_left() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1, wait_limit=15), clock=clock)
    holder = asyncio.create_task(_hold(limiter, clock, Job("report"), 100))
    await clock.advance(0)
    started = clock.now()

    async def produce() -> None:
        async with guard(limiter, Job("export"), retry_for=2):
            pass

    producer = asyncio.create_task(produce())
    await clock.advance(1.9)
    assert not producer.done()
    await clock.advance(0.1)
    with pytest.raises(Rejected) as rejected:
        producer.result()
    # It queued for the 2 s it had (not requestWaitLimit's 15 s), and gave up then.
    assert rejected.value.reason == "time-out"
    assert clock.now() - started == pytest.approx(2.0)
    level = limiter.statistics().priority_levels["jobs"]
    assert (level.executing_requests, level.waiting_requests, level.timed_out) == (1, 0, 1)
    holder.cancel()


async def test_a_producer_cancelled_while_it_pauses_holds_nothing() -> None:
    clock = FakeClock()
    limiter = Limiter(jobs_config(limit=1, reject=True), clock=clock)
    holder = asyncio.create_task(_hold(limiter, clock, Job("report"), 100))
    await clock.advance(0)
    timers = clock.pending_timers
    producer = asyncio.create_task(admit_with_retry(limiter, Job("export"), retry_for=30))
    await clock.advance(0.5)
    assert clock.pending_timers == timers + 1  # its pause
    producer.cancel()
    await clock.advance(0)
    assert producer.cancelled()
    assert clock.pending_timers == timers  # the pause's timer went with it
    assert limiter.statistics().priority_levels["jobs"].executing_requests == 1
    holder.cancel()


async def test_fairness_holds_between_a_flooding_tenant_and_a_quiet_one() -> None:
    clock = FakeClock()
    config = jobs_config(limit=2, queues=16, hand_size=4, queue_length_limit=5)
    limiter = Limiter(config, clock=clock, hash_seed=1)
    pick = random.Random(5).random
    waits: dict[str, list[float]] = {"etl": [], "acme": []}

    async def submit(tenant: str, work: float) -> None:
        arrived = clock.now()
        admission = await admit_with_retry(
            limiter, Job("report", tenant=tenant), retry_for=600, random=pick
        )
        try:
            waits[tenant].append(clock.now() - arrived)  # queueing and retrying both count
            await clock.sleep(work)
        finally:
            admission.release()

    async def quiet() -> None:
        for _ in range(10):
            await clock.sleep(3)
            await submit("acme", 0.5)

    flood = [asyncio.create_task(submit("etl", 1.0)) for _ in range(60)]
    steady = asyncio.create_task(quiet())
    await clock.run_until_idle()
    assert steady.done() and steady.exception() is None
    assert all(task.done() and task.exception() is None for task in flood)
    assert len(waits["etl"]) == 60 and len(waits["acme"]) == 10  # nothing was dropped
    # The quiet tenant waits at most for one seat to come free; the flood waits its turn.
    assert max(waits["acme"]) <= 1.0
    assert sorted(waits["etl"])[30] > 10 * max(waits["acme"])
