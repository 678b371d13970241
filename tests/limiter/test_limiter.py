"""The async shell: admission, rejection, wait limits, cancellation, hand-off, statistics."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

import apf_limiter.limiter._limiter
from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import limited_level, single_level_config, subject_schema


def _digest(user: str = "alice", **kwargs: Any) -> RequestDigest:
    return RequestDigest(user=user, groups=("system:authenticated",), **kwargs)


class Hold:
    """A task that holds an admission until released."""

    def __init__(self, limiter: Limiter, digest: RequestDigest, **kwargs: Any) -> None:
        self.release = asyncio.Event()
        self.entered = False
        self.error: BaseException | None = None
        self.queue_wait: float | None = None
        self.task = asyncio.get_running_loop().create_task(self._run(limiter, digest, kwargs))

    async def _run(self, limiter: Limiter, digest: RequestDigest, kwargs: dict[str, Any]) -> None:
        try:
            async with limiter.admit(digest, **kwargs) as admission:
                self.entered = True
                self.queue_wait = admission.queue_wait
                await self.release.wait()
        except Rejected as exc:
            self.error = exc


async def test_fast_path_admits_without_yielding_to_the_event_loop() -> None:
    limiter = Limiter(single_level_config(limit=2), clock=FakeClock())
    admission = limiter.admit(_digest())
    enter = admission.__aenter__()
    with pytest.raises(StopIteration) as entered:
        enter.send(None)
    assert entered.value.value is admission
    assert admission.flow_schema == "test"
    assert admission.priority_level == "test"
    assert admission.queue_wait == 0.0
    assert admission.seats == 1
    # One queue: the level does not hash, so there is no flow distinguisher (Kubernetes).
    assert admission.distinguisher == ""
    assert limiter.statistics().priority_levels["test"].executing_requests == 1
    # Leaving releases synchronously and returns an awaitable that is already complete.
    leave = admission.__aexit__(None, None, None)
    assert limiter.statistics().priority_levels["test"].executing_requests == 0
    with pytest.raises(StopIteration):
        next(iter(leave.__await__()))
    assert limiter.statistics().priority_levels["test"].executing_requests == 0


async def test_distinguisher_only_at_a_level_that_hashes() -> None:
    hashing = Limiter(single_level_config(limit=2, queues=8, hand_size=2), clock=FakeClock())
    async with hashing.admit(_digest()) as admission:
        assert admission.distinguisher == "alice"


async def test_queued_request_runs_when_seats_free_and_reports_its_wait() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    first = Hold(limiter, _digest("a"))
    second = Hold(limiter, _digest("b"))
    await clock.advance(0)
    assert first.entered and not second.entered
    stats = limiter.statistics().priority_levels["test"]
    assert (stats.executing_requests, stats.waiting_requests) == (1, 1)
    await clock.advance(2.5)
    first.release.set()
    await clock.advance(0)
    assert second.entered
    assert second.queue_wait == 2.5
    second.release.set()
    await asyncio.gather(first.task, second.task)
    stats = limiter.statistics().priority_levels["test"]
    assert (stats.executing_requests, stats.waiting_requests, stats.dispatched) == (0, 0, 2)


async def test_reject_level_raises_concurrency_limit_with_retry_after() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, reject=True), clock=clock)
    holder = Hold(limiter, _digest())
    await clock.advance(0)
    with pytest.raises(Rejected) as info:
        async with limiter.admit(_digest("bob")):
            pytest.fail("must not run")
    assert info.value.reason == "concurrency-limit"
    assert info.value.priority_level == "test"
    assert info.value.flow_schema == "test"
    assert info.value.retry_after == 1
    holder.release.set()
    await holder.task
    stats = limiter.statistics()
    assert stats.priority_levels["test"].rejected["concurrency-limit"] == 1
    assert stats.flow_schemas["test"].rejected["concurrency-limit"] == 1


async def test_full_queue_rejects_with_queue_full() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, queue_length_limit=1), clock=clock)
    running, waiting = Hold(limiter, _digest("a")), Hold(limiter, _digest("b"))
    await clock.advance(0)
    with pytest.raises(Rejected) as info:
        async with limiter.admit(_digest("c")):
            pytest.fail("must not run")
    assert info.value.reason == "queue-full"
    running.release.set()
    await clock.advance(0)
    waiting.release.set()
    await asyncio.gather(running.task, waiting.task)
    assert limiter.statistics().priority_levels["test"].rejected["queue-full"] == 1


async def test_wait_limit_from_config_times_out_exactly() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, wait_limit=15), clock=clock)
    running = Hold(limiter, _digest("a"))
    waiting = Hold(limiter, _digest("b"))
    await clock.advance(14.999)
    assert waiting.error is None
    await clock.advance(0.001)
    assert isinstance(waiting.error, Rejected)
    assert waiting.error.reason == "time-out"
    assert waiting.task.done()
    stats = limiter.statistics().priority_levels["test"]
    assert stats.timed_out == 1 and stats.waiting_requests == 0
    assert stats.rejected["time-out"] == 1
    running.release.set()
    await running.task


async def test_per_call_wait_limit_overrides_config() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, wait_limit=15), clock=clock)
    running = Hold(limiter, _digest("a"))
    waiting = Hold(limiter, _digest("b"), wait_limit=2.0)
    await clock.advance(2.0)
    assert isinstance(waiting.error, Rejected) and waiting.error.reason == "time-out"
    running.release.set()
    await running.task
    with pytest.raises(ValueError, match="wait_limit"):
        limiter.admit(_digest(), wait_limit=-1)
    # Kubernetes caps every queue wait at one minute, as requestWaitLimit is.
    with pytest.raises(ValueError, match="between 0 and 60 seconds"):
        limiter.admit(_digest(), wait_limit=120)
    limiter.admit(_digest(), wait_limit=60)


async def test_cancelling_a_queued_task_removes_it_and_reraises() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    running = Hold(limiter, _digest("a"))
    waiting = Hold(limiter, _digest("b"))
    await clock.advance(1)
    waiting.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting.task
    assert not waiting.entered
    stats = limiter.statistics()
    assert stats.priority_levels["test"].waiting_requests == 0
    assert stats.priority_levels["test"].cancelled == 1
    assert stats.flow_schemas["test"].cancelled == 1
    running.release.set()
    await running.task
    assert limiter.statistics().priority_levels["test"].dispatched == 1


async def test_cancellation_racing_with_dispatch_hands_the_seats_on() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    async with limiter.admit(_digest("a")):
        second = Hold(limiter, _digest("b"))
        third = Hold(limiter, _digest("c"))
        await clock.advance(0)
        assert limiter.statistics().priority_levels["test"].waiting_requests == 2
    # Leaving dispatched the second request; its task is cancelled before it could run.
    second.task.cancel()
    await clock.advance(0)
    assert second.task.cancelled()
    assert not second.entered
    assert third.entered, "the cancelled request's seats must go to the next one"
    third.release.set()
    await third.task
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats, level.waiting_requests) == (0, 0, 0)
    assert level.dispatched == 3


@pytest.mark.parametrize("how", ["cancelled", "released"])
async def test_a_request_that_never_ran_does_not_hold_its_additional_latency(how: str) -> None:
    # The additional latency stands for work a request leaves behind; one given its seats at
    # the instant its waiter was cancelled (or it was released) never ran, and left none.
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    holder = limiter.admit(_digest("a"))
    assert holder.start()
    lingering = RequestDigest(user="b", additional_latency=10.0, final_seats=1)
    if how == "cancelled":
        ran: list[str] = []

        async def body() -> None:
            async with limiter.admit(lingering):
                ran.append("b")

        task = asyncio.get_running_loop().create_task(body())
        await clock.advance(0)
        holder.release()  # b is dispatched ...
        task.cancel()  # ... and cancelled before it could run
        await clock.advance(0)
        assert task.cancelled() and ran == []
    else:
        queued = limiter.admit(lingering)
        assert not queued.start()
        holder.release()  # dispatched ...
        queued.release()  # ... and released before anyone waited for it
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats) == (0, 0)
    assert limiter.admit(_digest("c")).start(), "the seat must pass on at once"
    assert level.dispatched == 2


async def test_exception_in_body_releases_seats_and_propagates() -> None:
    limiter = Limiter(single_level_config(limit=1, reject=True), clock=FakeClock())

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with limiter.admit(_digest()):
            raise Boom
    # The next request on the concurrency-1 level is not rejected.
    async with limiter.admit(_digest()) as admission:
        assert admission.priority_level == "test"
    assert limiter.statistics().priority_levels["test"].executing_requests == 0


async def test_additional_latency_holds_final_seats_after_exit() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=10), clock=clock)
    digest = _digest(seats=1, final_seats=1, additional_latency=5.0)
    async with limiter.admit(digest) as admission:
        assert admission.final_seats == 1
        assert admission.additional_latency == 5.0
    stats = limiter.statistics().priority_levels["test"]
    assert (stats.executing_requests, stats.executing_seats) == (0, 1)
    await clock.advance(4.9)
    assert limiter.statistics().priority_levels["test"].executing_seats == 1
    await clock.advance(0.1)
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


async def test_an_additional_latency_without_final_seats_holds_the_initial_seats() -> None:
    # queueset.go (finishRequestLocked): a request holds MaxSeats = max(initial, final) until
    # its additional latency has passed, whatever its final seats.
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=10), clock=clock)
    async with limiter.admit(_digest(seats=2, additional_latency=1.0)) as admission:
        assert (admission.final_seats, admission.additional_latency) == (0, 1.0)
    assert limiter.statistics().priority_levels["test"].executing_seats == 2
    await clock.advance(1.0)
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


async def test_seats_are_clamped_to_max_seats() -> None:
    limiter = Limiter(single_level_config(limit=100, queues=8, hand_size=4), clock=FakeClock())
    # maxSeats = max(1, min(ceil(0.15 × 100), 100 // 4)) = 15
    async with limiter.admit(_digest(seats=40, final_seats=50, additional_latency=1.5)) as adm:
        assert adm.seats == 15
        # As Kubernetes' estimators clamp: fewer final seats held longer, for the same final
        # work (50 seats × 1.5 s = 15 seats × 5 s).
        assert adm.final_seats == 15
        assert adm.additional_latency == 5.0
    assert limiter.statistics().priority_levels["test"].max_seats == 15


async def test_max_seats_stays_after_a_switch_to_reject() -> None:
    # apf_controller.go (finishQueueSetReconfigsLocked): maxSeats is set for queuing levels and
    # never cleared, so a level switched from Queue to Reject keeps clamping with its old value
    # until it is removed.
    limiter = Limiter(single_level_config(limit=100, queues=4, hand_size=4), clock=FakeClock())
    async with limiter.admit(_digest(seats=40)) as admission:
        assert admission.seats == 15
    limiter.reconfigure(single_level_config(limit=100, reject=True))
    async with limiter.admit(_digest(seats=40)) as admission:
        assert admission.seats == 15
    assert limiter.statistics().priority_levels["test"].max_seats == 15


async def test_seats_of_a_level_that_never_queued_are_capped_at_the_global_maximum() -> None:
    limiter = Limiter(single_level_config(limit=1000, reject=True), clock=FakeClock())
    async with limiter.admit(_digest(seats=150)) as admission:
        assert admission.seats == 100
    assert limiter.statistics().priority_levels["test"].max_seats == 0


async def test_max_seats_above_the_global_maximum_is_capped() -> None:
    # maxSeats = max(1, min(ceil(0.15 × 1000), 1000 // 1)) = 150 > 100: the estimator's
    # global maximum (100) is used instead.
    limiter = Limiter(single_level_config(limit=1000, queues=1, hand_size=1), clock=FakeClock())
    assert limiter.statistics().priority_levels["test"].max_seats == 150
    async with limiter.admit(_digest(seats=120)) as admission:
        assert admission.seats == 100


async def test_admission_misuse() -> None:
    limiter = Limiter(single_level_config(limit=1), clock=FakeClock())
    admission = limiter.admit(_digest())
    with pytest.raises(RuntimeError, match="not been entered"):
        _ = admission.flow_schema
    async with admission:
        pass
    with pytest.raises(RuntimeError, match="only once"):
        async with admission:
            pass
    assert "Admission" in repr(admission)


async def test_statistics_and_repr_show_live_counts() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=2), clock=clock)
    holders = [Hold(limiter, _digest(f"u{i}")) for i in range(3)]
    await clock.advance(0)
    stats = limiter.statistics()
    level = stats.priority_levels["test"]
    assert (level.executing_requests, level.executing_seats) == (2, 2)
    assert (level.waiting_requests, level.waiting_seats) == (1, 1)
    assert (level.nominal_limit, level.current_limit, level.lower_limit) == (2, 2, 2)
    assert stats.flow_schemas["test"].matched == 3
    assert stats.flow_schemas["test"].executing_requests == 2
    assert stats.flow_schemas["test"].waiting_requests == 1
    assert stats.executing_requests == 2 and stats.waiting_requests == 1
    assert "test: 2/2 seats, 2 executing, 1 waiting" in repr(limiter)
    for holder in holders:
        holder.release.set()
        await clock.advance(0)
    await asyncio.gather(*(h.task for h in holders))
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests, level.executing_seats) == (0, 0, 0)


async def test_context_cancel_of_a_queued_request() -> None:
    # Kubernetes TestContextCancel: 11 queues, hand 1, limit 1. Request 1 runs; inside it
    # request 2 is started and cancelled 1 s later: it never runs and ends exactly then.
    clock = FakeClock()
    config = single_level_config(limit=1, queues=11, hand_size=1, queue_length_limit=11)
    limiter = Limiter(config, clock=clock, hash_seed=7)
    ended_at: list[float] = []
    ran = []

    async def second() -> None:
        try:
            async with limiter.admit(_digest("two")):
                ran.append(2)
        finally:
            ended_at.append(clock.now())

    async with limiter.admit(_digest("one")):
        task = asyncio.get_running_loop().create_task(second())
        await clock.advance(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ran == []
    assert ended_at == [1.0]
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests, level.cancelled) == (0, 0, 1)


async def _run_storm(limiter: Limiter, clock: FakeClock, count: int, seed: int) -> dict[str, int]:
    import random

    rng = random.Random(seed)
    outcomes = {"executed": 0, "rejected": 0, "cancelled": 0, "failed": 0}

    class Failure(Exception):
        pass

    async def one(i: int) -> None:
        digest = _digest(f"user{rng.randrange(50)}")
        hold = rng.choice([0, 0.01, 0.05, 0.2])
        fail = rng.random() < 0.1
        try:
            async with limiter.admit(digest, wait_limit=rng.choice([0.05, 0.2, 1.0])):
                await clock.sleep(hold)
                if fail:
                    raise Failure
            outcomes["executed"] += 1
        except Rejected:
            outcomes["rejected"] += 1
        except Failure:
            outcomes["failed"] += 1
        except asyncio.CancelledError:
            outcomes["cancelled"] += 1

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    for i in range(count):
        tasks.append(loop.create_task(one(i)))
        if i % 20 == 19:
            await clock.advance(0.01)
            for task in rng.sample(tasks[-20:], 3):
                task.cancel()
    await clock.run_until_idle()
    await asyncio.gather(*tasks, return_exceptions=True)
    return outcomes


async def test_cancellation_storm_accounts_for_every_request() -> None:
    clock = FakeClock()
    config = single_level_config(limit=8, queues=16, hand_size=4, queue_length_limit=20)
    limiter = Limiter(config, clock=clock, hash_seed=1)
    outcomes = await _run_storm(limiter, clock, 10_000, seed=42)
    assert sum(outcomes.values()) == 10_000
    assert all(outcomes[kind] > 0 for kind in outcomes), outcomes
    stats = limiter.statistics()
    level = stats.priority_levels["test"]
    assert (level.executing_requests, level.executing_seats) == (0, 0)
    assert (level.waiting_requests, level.waiting_seats) == (0, 0)
    schema = stats.flow_schemas["test"]
    assert schema.matched == 10_000
    # Executed and failed requests were dispatched; every other one ended without running
    # (a request dispatched while its task was being cancelled counts as dispatched).
    ran = outcomes["executed"] + outcomes["failed"]
    rejected = sum(schema.rejected.values())
    assert schema.dispatched >= ran
    assert schema.dispatched + rejected + schema.cancelled == 10_000
    assert outcomes["rejected"] == rejected
    assert schema.executing_requests == 0 and schema.waiting_requests == 0


async def test_real_clock_wait_limit_and_additional_latency() -> None:
    limiter = Limiter(single_level_config(limit=1))
    loop = asyncio.get_running_loop()
    async with limiter.admit(_digest("a")):
        start = loop.time()
        with pytest.raises(Rejected) as info:
            async with limiter.admit(_digest("b"), wait_limit=0.02):
                pytest.fail("must not run")
        assert info.value.reason == "time-out"
        assert loop.time() - start >= 0.015
    async with limiter.admit(_digest(final_seats=1, additional_latency=0.02)):
        pass
    assert limiter.statistics().priority_levels["test"].executing_seats == 1
    await asyncio.sleep(0.05)
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


async def test_start_wait_release_without_async_with() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    first = limiter.admit(_digest("a"))
    assert first.start() is True
    second = limiter.admit(_digest("b"))
    assert second.start() is False  # queued: wait() must follow
    task = asyncio.get_running_loop().create_task(second.wait())
    await clock.advance(1)
    assert not task.done()
    first.release()
    first.release()  # idempotent
    await clock.advance(0)
    assert task.done() and task.exception() is None
    assert second.queue_wait == 1.0
    second.release()
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests, level.dispatched) == (0, 0, 2)
    # Releasing a request that still waits takes it out of its queue.
    third, fourth = limiter.admit(_digest("c")), limiter.admit(_digest("d"))
    assert third.start() and not fourth.start()
    fourth.release()
    level = limiter.statistics().priority_levels["test"]
    assert (level.waiting_requests, level.cancelled) == (0, 1)
    third.release()
    with pytest.raises(RuntimeError, match="only once"):
        third.start()
    with pytest.raises(RuntimeError, match="start"):
        await limiter.admit(_digest("e")).wait()


def _route_user_to(config: dict[str, Any], user: str, level: str) -> None:
    """Put a schema sending ``user``'s requests to ``level`` first in ``config``."""
    config["flowSchemas"].insert(
        0,
        {
            "name": level,
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": 10,
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": user}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    )


async def test_a_level_with_limit_zero_gets_seats_as_soon_as_requests_wait() -> None:
    # A small server: "anonymous" lends 90% of its 4 nominal seats, so its lower limit is 0
    # and the first adjustment (no demand yet) leaves it at 0. A waiting request triggers an
    # adjustment at once (not 10 s later) that gives the level seats.
    config = single_level_config(limit=10)
    config["priorityLevels"].append(
        {"name": "anonymous", "limited": {"nominalConcurrencyShares": 10000, "lendablePercent": 90}}
    )
    _route_user_to(config, "system:anonymous", "anonymous")
    limiter = Limiter(config, clock=FakeClock())
    level = limiter.statistics().priority_levels["anonymous"]
    assert (level.lower_limit, level.current_limit) == (0, 0)
    async with limiter.admit(RequestDigest()) as admission:
        assert admission.priority_level == "anonymous"
        assert admission.queue_wait == 0.0
        assert limiter.statistics().priority_levels["anonymous"].current_limit >= 1


async def test_a_borrow_only_level_gets_a_seat_as_soon_as_a_request_waits() -> None:
    # No shares of its own but free to borrow (borrowingLimitPercent unset): on an idle server
    # a waiting request opens it at once (D5), its seat demand counted in that adjustment,
    # rather than timing out before the next period (its smoothed demand is still ~0).
    config = single_level_config(limit=10, wait_limit=5, borrowing_period=10)
    config["priorityLevels"][0]["limited"]["lendablePercent"] = 100
    config["priorityLevels"].append(
        {"name": "borrower", "limited": {"nominalConcurrencyShares": 0}}
    )
    _route_user_to(config, "u", "borrower")
    clock = FakeClock()
    limiter = Limiter(config, clock=clock)
    level = limiter.statistics().priority_levels["borrower"]
    assert (level.nominal_limit, level.current_limit, level.upper_limit) == (0, 0, 10)
    admission = limiter.admit(_digest("u"))
    # start() returns True: the adjustment it ran dispatched the request at once.
    assert admission.start() and admission.priority_level == "borrower"
    assert limiter.statistics().priority_levels["borrower"].current_limit >= 1
    admission.release()


async def test_a_jail_level_stays_shut() -> None:
    # Deviation D3: a level with no shares (nominal 0) admits nothing, even when idle.
    config = single_level_config(limit=10, wait_limit=1)
    config["priorityLevels"].append(
        {"name": "jail", "limited": {"nominalConcurrencyShares": 0, "borrowingLimitPercent": 0}}
    )
    _route_user_to(config, "mallory", "jail")
    clock = FakeClock()
    limiter = Limiter(config, clock=clock)
    task = asyncio.get_running_loop().create_task(_admit_once(limiter, "mallory"))
    await clock.advance(1)
    with pytest.raises(Rejected) as info:
        await task
    assert info.value.reason == "time-out"
    assert limiter.statistics().priority_levels["jail"].dispatched == 0


async def _admit_once(limiter: Limiter, user: str) -> None:
    async with limiter.admit(_digest(user)):
        pass


async def test_wait_after_release_or_time_out_never_pretends_to_admit() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, wait_limit=2), clock=clock)
    holder = limiter.admit(_digest("a"))
    assert holder.start()
    released = limiter.admit(_digest("b"))
    assert not released.start()
    released.release()
    with pytest.raises(RuntimeError, match="released"):
        await released.wait()
    # Released by another task while waiting: the waiter wakes up and is told.
    other = limiter.admit(_digest("c"))
    assert not other.start()
    task = asyncio.get_running_loop().create_task(other.wait())
    await clock.advance(0)
    other.release()
    await clock.advance(0)
    assert isinstance(task.exception(), RuntimeError)
    # Timed out: every wait() raises the rejection.
    late = limiter.admit(_digest("d"))
    assert not late.start()
    waiting = asyncio.get_running_loop().create_task(late.wait())
    await clock.advance(2)
    assert isinstance(waiting.exception(), Rejected)
    with pytest.raises(Rejected, match="time-out"):
        await late.wait()
    holder.release()
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests) == (0, 0)
    assert (level.cancelled, level.timed_out) == (2, 1)


# --- races with a borrowing adjustment or a time-out that fell due ---------------------------


def _borrowing_pair(wait_limit: float) -> dict[str, Any]:
    """Levels ``la`` (1 queue) and ``lb``, half lendable each: ``la`` starts at 4 seats and
    borrows ``lb``'s lendable seats at the first adjustment after it shows demand."""
    return {
        "serverConcurrencyLimit": 10,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [
            limited_level("la", 50, lendable=50, queues=1, hand_size=1, queue_length_limit=5),
            limited_level("lb", 50, lendable=50),
        ],
        "flowSchemas": [
            subject_schema("as", "la", group="a"),
            subject_schema("bs", "lb", group="system:authenticated", precedence=500),
        ],
    }


def _in_a(user: str) -> RequestDigest:
    return RequestDigest(user=user, groups=("a", "system:authenticated"))


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_cancellation_as_an_adjustment_falls_due_hands_the_seats_back() -> None:
    clock = FakeClock()
    limiter = Limiter(_borrowing_pair(wait_limit=30), clock=clock, hash_seed=1)
    holders = [Hold(limiter, _in_a(f"a{i}")) for i in range(4)]
    await clock.advance(0)
    assert limiter.statistics().priority_levels["la"].current_limit == 4
    # The client goes away at t=10, when the adjustment that gives la more seats is due but
    # has not run (the cancellation's timer comes first): the adjustment, run as the waiter
    # leaves, dispatches it, and its seats must be handed back.
    box: list[Hold] = []

    def leave() -> None:
        box[0].task.cancel()

    clock.call_later(10, leave)
    waiter = Hold(limiter, _in_a("w"))
    box.append(waiter)
    await _settle()
    await clock.advance(10)
    await _settle()
    assert waiter.task.cancelled()  # CancelledError, not an engine error
    assert limiter.statistics().priority_levels["la"].executing_requests == 4
    for holder in holders:
        holder.release.set()
    await _settle()
    la = limiter.statistics().priority_levels["la"]
    assert (la.executing_requests, la.executing_seats, la.waiting_requests) == (0, 0, 0)


async def test_a_wait_limit_as_an_adjustment_falls_due_lets_the_adjustment_dispatch_first() -> None:
    clock = FakeClock()
    limiter = Limiter(_borrowing_pair(wait_limit=10), clock=clock, hash_seed=1)
    holders = [Hold(limiter, _in_a(f"a{i}")) for i in range(5)]
    await clock.advance(0)
    assert [h.entered for h in holders] == [True] * 4 + [False]
    await clock.advance(10)  # the wait limit and the adjustment, both due at t=10
    await _settle()
    assert holders[4].entered and holders[4].error is None
    for holder in holders:
        holder.release.set()
    await _settle()
    assert limiter.statistics().priority_levels["la"].executing_requests == 0


class _Recorder:
    """An observer that records rejections and cancellations."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            if name in ("request_rejected", "request_cancelled"):
                self.events.append((name, args[2] if name == "request_rejected" else ""))

        return record


async def test_a_time_out_just_before_a_cancellation_is_still_reported() -> None:
    # The wait-limit timer fires and the waiting task is cancelled (a client disconnect) in
    # the same pass of the event loop, before the task resumes: the request timed out, and
    # that is what is recorded. (A FakeClock lets woken tasks run between timers, so the
    # timer's callback is called here directly, as the event loop would.)
    clock = FakeClock()
    recorder = _Recorder()
    limiter = Limiter(
        single_level_config(limit=1, wait_limit=5),
        clock=clock,
        observer=recorder,  # type: ignore[arg-type]
    )
    running = Hold(limiter, _digest("a"))
    await clock.advance(0)
    admission = limiter.admit(_digest("b"))
    assert not admission.start()
    waiting = asyncio.get_running_loop().create_task(admission.wait())
    await _settle()
    request = admission._request
    assert request is not None
    limiter._core._on_wait_limit(request)  # the wait limit passes ...
    waiting.cancel()  # ... and the client goes away, before the waiting task resumes
    await _settle()
    assert waiting.cancelled()
    assert recorder.events == [("request_rejected", "time-out")]
    assert limiter.statistics().flow_schemas["test"].rejected["time-out"] == 1
    admission.release()  # nothing more to record
    assert recorder.events == [("request_rejected", "time-out")]
    running.release.set()
    await _settle()


def test_a_hand_built_configuration_with_a_dangling_schema_is_refused_clearly() -> None:
    from apf_limiter.config import load_config
    from apf_limiter.config._model import FlowSchema

    valid = load_config({})
    dangling = replace(valid, flow_schemas=(*valid.flow_schemas, FlowSchema("x", "nowhere")))
    with pytest.raises(ValueError, match="flow schema 'x' refers to priority level 'nowhere'"):
        Limiter(dangling, clock=FakeClock())
    limiter = Limiter(valid, clock=FakeClock())
    with pytest.raises(ValueError, match="'nowhere'"):
        limiter.reconfigure(dangling)
    assert limiter.config is valid  # nothing changed


@pytest.mark.parametrize(("start", "period"), [(123.456, 10.0), (0.0, 0.2), (123.456, 2.5)])
async def test_the_borrowing_timer_runs_on_schedule_at_any_clock_value(
    start: float, period: float
) -> None:
    # The FakeClock rounds a timer's delay to whole nanoseconds, so the borrowing timer can
    # fire a hair before the adjustment's float due time: it must still run it (it used to
    # re-arm itself for 0 s, forever).
    clock = FakeClock(start=start)
    limiter = Limiter(single_level_config(limit=1, borrowing_period=period), clock=clock)
    assert limiter.admit(_digest("a")).start()
    assert not limiter.admit(_digest("b"), wait_limit=60).start()  # waits: the timer runs
    before = limiter.statistics().adjustments
    await asyncio.wait_for(clock.advance(20 * period), timeout=10)
    limiter.run_due()  # statistics() is a pure read
    assert limiter.statistics().adjustments == before + 20


async def test_a_closed_limiter_arms_no_borrowing_timer() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    limiter.close()
    assert limiter.admit(_digest("a")).start()
    assert not limiter.admit(_digest("b"), wait_limit=60).start()
    assert clock.pending_timers == 1  # the wait limit's, and no borrowing timer
    await clock.advance(25)
    limiter.run_due()  # the adjustments that fell due run now, on their grid
    assert limiter.statistics().adjustments == 1 + 2


async def test_wait_after_a_rejected_start_says_so() -> None:
    limiter = Limiter(single_level_config(limit=1, reject=True), clock=FakeClock())
    assert limiter.admit(_digest("a")).start()
    rejected = limiter.admit(_digest("b"))
    with pytest.raises(Rejected):
        rejected.start()
    with pytest.raises(RuntimeError, match="rejected by start"):
        await rejected.wait()


def test_a_start_that_cannot_wait_leaves_nothing_in_the_queue() -> None:
    # Without a running event loop a request that must queue cannot wait: start() raises, and
    # the request must not stay queued (dispatched later, it would hold its seat for good).
    limiter = Limiter(single_level_config(limit=1), clock=FakeClock())
    holder = limiter.admit(_digest())
    assert holder.start()
    second = limiter.admit(_digest())
    with pytest.raises(RuntimeError, match="event loop"):
        second.start()
    assert limiter.statistics().priority_levels["test"].waiting_requests == 0
    holder.release()
    second.release()  # nothing to do
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


@pytest.mark.timeout(10)
async def test_a_second_concurrent_wait_is_refused_and_the_first_goes_on() -> None:
    # Two tasks waiting on one admission: cancelling one would cancel (asyncio) or strand
    # (trio) the other, so the second is refused at once.
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    holder = limiter.admit(_digest())
    assert holder.start()
    queued = limiter.admit(_digest())
    assert not queued.start()
    first = asyncio.get_running_loop().create_task(queued.wait())
    await clock.advance(0)
    with pytest.raises(RuntimeError, match="already waiting"):
        await queued.wait()
    assert limiter.statistics().priority_levels["test"].waiting_requests == 1
    holder.release()
    await first
    assert queued.seats == 1
    await queued.wait()  # after the wait: returns at once, as before
    queued.release()
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


async def test_float_seats_are_refused_before_they_reach_a_level() -> None:
    limiter = Limiter(clock=FakeClock(), hash_seed=1)
    user = RequestDigest(user="alice", groups=("system:authenticated",), path="/reports")
    with pytest.raises(ValueError, match="seats must be an integer"):
        limiter.admit(RequestDigest(user="alice", path="/reports", seats=2.0))  # type: ignore[arg-type]
    # The level still works, and holds nothing.
    async with limiter.admit(user) as admission:
        assert admission.seats == 1
    assert limiter.statistics().executing_seats == 0


def test_wrong_types_for_wait_limit_and_hash_seed_are_type_errors() -> None:
    limiter = Limiter(clock=FakeClock(), hash_seed=1)
    # Pure Python names the argument; the compiled build's own argument check answers first
    # ("float or None object expected"): a TypeError either way, not a confusing comparison.
    compiled = not (apf_limiter.limiter._limiter.__file__ or "").endswith(".py")
    with pytest.raises(TypeError, match="float or None" if compiled else "wait_limit must be"):
        limiter.admit(RequestDigest(), wait_limit="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int or None" if compiled else "hash_seed must be"):
        Limiter(clock=FakeClock(), hash_seed="x")  # type: ignore[arg-type]
