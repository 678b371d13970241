"""The limiter's timers and waiters: late, lost with an event loop, or never waited for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apf_limiter import Admission, Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def _digest(user: str = "alice", **kwargs: Any) -> RequestDigest:
    return RequestDigest(user=user, groups=("system:authenticated",), **kwargs)


class _LoopBoundClock:
    """Fake time whose timers belong to the running asyncio loop and never fire there: what
    a limiter sees of its timers once the loop they were set in has ended."""

    def __init__(self) -> None:
        self.time = 0.0
        self.timers = 0

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return asyncio.get_running_loop().call_later(3600.0, callback, *args)


@pytest.mark.timeout(10)
def test_a_limiter_outliving_its_event_loop_gives_back_lost_final_seats() -> None:
    # A module-level limiter used by one asyncio.run after another: the timers that give back
    # final seats are lost with the first loop. The first borrowing adjustment at least a
    # period after they were due (run by whichever call comes) gives them back.
    clock = _LoopBoundClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)  # borrowing period 10 s

    async def first_loop() -> None:
        async with limiter.admit(_digest(final_seats=1, additional_latency=1.0)):
            pass  # its seat stays held for 1 s

    asyncio.run(first_loop())
    assert limiter.statistics().priority_levels["test"].executing_seats == 1
    clock.time = 10.5  # the adjustment due at t = 10: less than a period after t = 1, kept
    assert limiter.statistics().priority_levels["test"].executing_seats == 1
    clock.time = 20.0  # the adjustment due at t = 20: lost

    async def second_loop() -> None:
        async with limiter.admit(_digest()):
            pass

    asyncio.run(second_loop())
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


class _ManualClock:
    """Fake time whose timers fire only when the test says so."""

    def __init__(self) -> None:
        self.time = 0.0
        self.timers: list[tuple[Any, tuple[Any, ...]]] = []

    def now(self) -> float:
        return self.time

    def call_later(self, delay: float, callback: Any, *args: Any) -> Any:
        self.timers.append((callback, args))
        return asyncio.get_running_loop().call_later(3600.0, lambda: None)


def _one_waiting(
    clock: Any, observer: Any = None, wait_limit: float = 15.0
) -> tuple[Limiter, Admission, Admission]:
    """One seat (borrowing period 10 s), held, and a request waiting for it: started, it set
    its wait-limit timer and then the borrowing timer (due at t = 10)."""
    limiter = Limiter(
        single_level_config(limit=1, wait_limit=wait_limit), clock=clock, observer=observer
    )
    holder = limiter.admit(_digest())
    assert holder.start()
    queued = limiter.admit(_digest())
    assert not queued.start()
    return limiter, holder, queued


async def test_a_borrowing_timer_beaten_by_a_call_runs_no_adjustment_early() -> None:
    # A call at the due time runs the adjustment first; the timer, firing just after, must
    # not run the next period's adjustment ahead of time.
    clock = _ManualClock()
    limiter, holder, queued = _one_waiting(clock)
    (on_borrowing_timer, arming) = clock.timers[-1]
    before = limiter.statistics().adjustments
    clock.time = 10.0
    limiter.run_due()
    assert limiter.statistics().adjustments == before + 1  # the call catches up at t = 10
    on_borrowing_timer(*arming)
    assert limiter.statistics().adjustments == before + 1  # not the one due at t = 20
    queued.release()
    holder.release()


def _borrowing_timers(clock: _ManualClock) -> list[tuple[Any, tuple[Any, ...]]]:
    return [t for t in clock.timers if getattr(t[0], "__name__", "") == "_on_borrowing_timer"]


async def _wait_behind_a_holder(limiter: Limiter) -> None:
    """A request waits for the one seat (setting the borrowing timer), then runs."""
    holder = limiter.admit(_digest())
    assert holder.start()
    queued = limiter.admit(_digest())
    assert not queued.start()
    holder.release()
    await queued.wait()
    queued.release()


def _after_a_loop_that_waited() -> tuple[_ManualClock, Limiter]:
    """A limiter (borrowing period 10 s) whose borrowing timer was set in a loop now ended."""
    clock = _ManualClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)
    asyncio.run(_wait_behind_a_holder(limiter))
    return clock, limiter


@pytest.mark.timeout(10)
def test_a_limiter_outliving_its_event_loop_arms_a_new_borrowing_timer() -> None:
    # The borrowing timer set while a request waited dies with its loop. Once its adjustment
    # is due, the next request that waits, in the next loop, sets a new one there.
    clock, limiter = _after_a_loop_that_waited()
    assert len(_borrowing_timers(clock)) == 1  # due at t = 10, lost with the loop
    clock.time = 12.0
    asyncio.run(_wait_behind_a_holder(limiter))
    armed = _borrowing_timers(clock)
    assert len(armed) == 2  # set again, in the second loop, for t = 20
    before = limiter.statistics().adjustments
    clock.time = 20.0
    on_borrowing_timer, arming = armed[-1]
    on_borrowing_timer(*arming)
    assert limiter.statistics().adjustments == before + 1


async def test_a_replaced_borrowing_timer_firing_after_all_does_nothing() -> None:
    # Past its due time a pending borrowing timer is replaced; if it was only late and fires
    # after all, it must neither adjust nor start a second chain of timers.
    clock = _ManualClock()
    limiter, holder, queued = _one_waiting(clock)
    (late, late_arming) = _borrowing_timers(clock)[-1]
    clock.time = 10.5
    second = limiter.admit(_digest())
    assert not second.start()  # the call runs the adjustment due at t = 10, sets a new timer
    (current, arming) = _borrowing_timers(clock)[-1]
    assert len(_borrowing_timers(clock)) == 2
    adjustments = limiter.statistics().adjustments
    timers = len(clock.timers)
    late(*late_arming)
    assert limiter.statistics().adjustments == adjustments
    assert len(clock.timers) == timers
    clock.time = 20.0
    current(*arming)
    assert limiter.statistics().adjustments == adjustments + 1
    assert len(_borrowing_timers(clock)) == 3  # the one chain goes on
    second.release()
    queued.release()
    holder.release()


async def test_a_release_timer_a_period_late_releases_once() -> None:
    # The release timer fires so late (a blocked loop) that its own catch-up gives the seat
    # back first: it must not release it a second time.
    clock = _ManualClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock)  # borrowing period 10 s
    async with limiter.admit(_digest(final_seats=1, additional_latency=1.0)):
        pass
    (release, args) = clock.timers[-1]
    clock.time = 12.0
    release(*args)
    assert limiter.statistics().priority_levels["test"].executing_seats == 0


async def test_a_borrowing_timer_firing_periods_late_catches_up_once() -> None:
    # A loop blocked for 2.5 periods: the timer runs the adjustments that fell due (t = 10,
    # 20), stays the only borrowing timer, and is set again for t = 30.
    clock = _ManualClock()
    limiter, holder, queued = _one_waiting(clock)
    (on_borrowing_timer, arming) = clock.timers[-1]
    before = limiter.statistics().adjustments
    armed = len(clock.timers)
    clock.time = 25.0
    on_borrowing_timer(*arming)
    assert limiter.statistics().adjustments == before + 2
    assert len(clock.timers) == armed + 1  # set again, once
    queued.release()
    holder.release()


@pytest.mark.timeout(10)
def test_a_borrowing_timer_from_an_ended_loop_is_replaced_before_it_is_due() -> None:
    # The next loop starts before the lost timer's due time: the timer is not pending, it
    # is gone with its loop, so the first request that waits sets one in the new loop.
    clock, limiter = _after_a_loop_that_waited()
    clock.time = 5.0  # the lost timer was due at t = 10
    asyncio.run(_wait_behind_a_holder(limiter))
    armed = _borrowing_timers(clock)
    assert len(armed) == 2
    before = limiter.statistics().adjustments
    clock.time = 10.0
    on_borrowing_timer, arming = armed[-1]
    on_borrowing_timer(*arming)  # the new loop's timer runs the adjustment due at t = 10
    assert limiter.statistics().adjustments == before + 1


class _Events:
    """An observer that records every event: its name and its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


async def test_a_time_out_nobody_waited_for_is_reported_once_at_release() -> None:
    # start() queued the request; no task called wait(); its wait limit passed; then the
    # caller gives up. The time-out is recorded then (observer, Retry-After), and only once.
    clock = FakeClock()
    events = _Events()
    _limiter, holder, queued = _one_waiting(clock, events, wait_limit=2)
    await clock.advance(3)
    queued.release()
    assert events.names.count("request_rejected") == 1
    with pytest.raises(Rejected) as rejected:
        await queued.wait()  # the time-out, again, without a second report
    assert rejected.value.reason == "time-out"
    queued.release()
    holder.release()
    assert events.names.count("request_rejected") == 1
    assert events.names.count("request_arrived") == 2
    assert events.names.count("request_finished") == 1


async def test_a_time_out_reported_by_release_is_not_reported_again_by_the_waiter() -> None:
    # The wait limit passes and, before the woken task resumes, another task releases the
    # admission: release() reports the time-out; the waiting task raises it, unreported.
    clock = FakeClock()
    events = _Events()
    limiter, holder, queued = _one_waiting(clock, events, wait_limit=2)
    waiting = asyncio.get_running_loop().create_task(queued.wait())
    await asyncio.sleep(0)
    request = queued._request
    assert request is not None
    limiter._core._on_wait_limit(request)  # the timer, as the event loop would run it
    queued.release()  # before the waiting task resumes
    with pytest.raises(Rejected):
        await waiting
    assert events.names.count("request_rejected") == 1
    holder.release()


@pytest.mark.timeout(10)
def test_a_request_dispatched_to_a_task_of_a_closed_loop_gives_its_seats_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A hand-run loop closed while a task still waited (asyncio.run would have cancelled
    # it): once dispatched, that request can never run. Its seats go back at once, and the
    # requests dispatched after it are woken as usual.
    events = _Events()
    limiter = Limiter(single_level_config(limit=1), observer=events)  # type: ignore[arg-type]
    holder = limiter.admit(_digest())
    assert holder.start()
    orphan = limiter.admit(_digest())
    loop = asyncio.new_event_loop()
    try:
        assert not loop.run_until_complete(_start(orphan))
        # Kept referenced: the garbage collector would close its coroutine, which gives
        # the seats back by itself.
        dead_task = loop.run_until_complete(_wait_a_moment(orphan))
    finally:
        loop.close()  # the task waiting for ``orphan`` is never cancelled

    async def second_loop() -> None:
        queued = limiter.admit(_digest())
        assert not queued.start()
        waiting = asyncio.get_running_loop().create_task(queued.wait())
        await asyncio.sleep(0)
        holder.release()  # dispatches the orphan, whose seat then goes to ``queued``
        await asyncio.wait_for(waiting, 5)
        assert queued.seats == 1
        queued.release()

    asyncio.run(second_loop())
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats, level.waiting_requests) == (0, 0, 0)
    assert events.names.count("request_dispatched") == 3
    assert events.names.count("request_finished") == 3
    assert "after its event loop had closed" in caplog.text
    assert not dead_task.done()


async def _start(admission: Admission) -> bool:
    return admission.start()


async def _wait_a_moment(admission: Admission) -> asyncio.Task[None]:
    # Leave a task waiting for the admission behind in this loop.
    task = asyncio.get_running_loop().create_task(admission.wait())
    await asyncio.sleep(0)
    return task


def _left_waiting_in_a_closed_loop(admissions: list[Admission]) -> list[asyncio.Task[None]]:
    """Start each admission (it queues) and leave a task waiting for it in a hand-run loop
    that is closed without cancelling them; the tasks are returned to keep them referenced
    (the garbage collector would close their coroutines, which give the seats back)."""
    loop = asyncio.new_event_loop()
    tasks: list[asyncio.Task[None]] = []

    async def leave() -> None:
        for admission in admissions:
            assert not admission.start()
            tasks.append(asyncio.get_running_loop().create_task(admission.wait()))
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(leave())
    finally:
        loop.close()
    return tasks


@pytest.mark.timeout(20)
def test_a_long_line_of_dead_waiters_is_finished_in_a_loop_not_a_recursion() -> None:
    # Each finished orphan dispatches the next one: finishing them recursively ran out of
    # stack at a few hundred, with a seat held for good and the rest stuck in the queue.
    limiter = Limiter(single_level_config(limit=1, queues=1, queue_length_limit=5000))
    holder = limiter.admit(_digest())
    assert holder.start()
    orphans = [limiter.admit(_digest(f"user-{i}")) for i in range(3000)]
    kept = _left_waiting_in_a_closed_loop(orphans)

    async def release() -> None:
        holder.release()

    asyncio.run(release())
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats, level.waiting_requests) == (0, 0, 0)
    assert len(kept) == 3000


def _borrowing_config() -> dict[str, Any]:
    """Level ``a`` (queuing, lends nothing) can borrow from ``b`` (lends everything)."""
    everyone = [
        {
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
    ]
    queuing = {"queues": 1, "handSize": 1, "queueLengthLimit": 50}
    return {
        "serverConcurrencyLimit": 20,
        "borrowingPeriod": 10,
        "priorityLevels": [
            {
                "name": "a",
                "limited": {
                    "nominalConcurrencyShares": 10,
                    "lendablePercent": 0,
                    "limitResponse": {"type": "Queue", "queuing": queuing},
                },
            },
            {"name": "b", "limited": {"nominalConcurrencyShares": 10, "lendablePercent": 100}},
        ],
        "flowSchemas": [
            {
                "name": "a",
                "priorityLevelConfiguration": {"name": "a"},
                "matchingPrecedence": 100,
                "rules": everyone,
            }
        ],
    }


@pytest.mark.timeout(10)
def test_an_adjustment_that_finishes_a_dead_waiter_runs_once() -> None:
    # The adjustment due at t = 10 lends level a a seat, dispatching a request whose task
    # died with its loop; finishing it runs the limiter's housekeeping, which must not run
    # the same adjustment again (twice per period, the smoothed demand decays twice as fast).
    clock = _ManualClock()
    limiter = Limiter(_borrowing_config(), clock=clock)
    limit = limiter.statistics().priority_levels["a"].current_limit
    holders = [limiter.admit(_digest()) for _ in range(limit)]
    assert all(holder.start() for holder in holders)
    orphan = limiter.admit(_digest())
    kept = _left_waiting_in_a_closed_loop([orphan])
    before = limiter.statistics().adjustments
    clock.time = 10.0
    limiter.run_due()
    level = limiter.statistics().priority_levels["a"]
    assert level.current_limit > limit  # the adjustment did lend a seat ...
    assert level.executing_requests == limit  # ... and the orphan gave it back at once
    assert limiter.statistics().adjustments == before + 1
    assert kept


async def test_a_synchronous_reconfigure_keeps_the_pending_borrowing_timer() -> None:
    # reconfigure() from code that runs no event loop (here: a timer callback's direct call
    # stands for it) cannot set a new timer, so it must keep the one that is pending.
    clock = _ManualClock()
    limiter, holder, queued = _one_waiting(clock)
    armed = len(_borrowing_timers(clock))

    def reconfigure_without_a_loop() -> None:
        limiter.reconfigure(single_level_config(limit=1))

    await asyncio.get_running_loop().run_in_executor(None, reconfigure_without_a_loop)
    assert len(_borrowing_timers(clock)) == armed  # no new timer, the old one kept
    assert limiter._core.adjustments.borrowing_timer is not None
    queued.release()
    holder.release()


async def test_a_time_out_reported_at_release_reports_the_wait_until_the_time_out() -> None:
    clock = FakeClock()
    events = _Events()
    _limiter, holder, queued = _one_waiting(clock, events, wait_limit=2)
    await clock.advance(3600)  # released an hour after its wait limit passed
    queued.release()
    waits = [args[3] for name, args in events.calls if name == "request_rejected"]
    assert waits == [pytest.approx(2.0)]
    holder.release()
