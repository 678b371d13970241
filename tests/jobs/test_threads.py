"""A limiter guarded from two threads' event loops at once: a clear error, nothing admitted.

Real threads, each with its own ``asyncio.run``, and the real clock; bounded to a second.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from apf_limiter import Limiter
from apf_limiter.gate import DEADLINE, Gate, SlowClients
from apf_limiter.jobs import Job, admit_with_retry, guard, guarded
from tests.jobs.configs import jobs_config

pytestmark = pytest.mark.timeout(30)


def _in_thread(
    main: Callable[[], Coroutine[Any, Any, object]],
) -> tuple[threading.Thread, list[Any]]:
    """Run ``main`` in a new thread under its own ``asyncio.run``; its outcome lands in the list."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(main()))
        except BaseException as error:  # handed to the test thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _held(limiter: Limiter) -> tuple[int, int]:
    level = limiter.statistics().priority_levels["jobs"]
    return level.executing_requests, level.waiting_requests


async def test_a_job_guarded_from_another_threads_running_loop_is_refused() -> None:
    # Before: the other thread's job queued; our release woke its future from this thread,
    # which its loop did not notice until its wait limit (5 s later, the seat held and idle).
    limiter = Limiter(jobs_config(limit=1, wait_limit=5))

    async def other_thread() -> list[str]:
        refused = []
        for enter in (
            lambda: guard(limiter, Job("report", tenant="b")).__aenter__(),
            lambda: admit_with_retry(limiter, Job("report", tenant="b"), retry_for=1),
            lambda: guarded(limiter, "report")(asyncio.sleep)(0),
        ):
            with pytest.raises(RuntimeError, match="another thread") as error:
                await enter()
            refused.append(str(error.value))
        return refused

    async with guard(limiter, Job("report", tenant="a")):
        thread, outcome = _in_thread(other_thread)
        await asyncio.to_thread(thread.join, 10)
        assert _held(limiter) == (1, 0)  # the other thread admitted nothing, queued nothing
    [refused] = outcome
    assert len(refused) == 3 and "one event loop at a time" in refused[0]
    assert _held(limiter) == (0, 0)
    statistics = limiter.statistics().priority_levels["jobs"]
    assert (statistics.dispatched, sum(statistics.rejected.values())) == (1, 0)


def test_a_limiter_moves_to_a_new_loop_once_the_old_one_stopped() -> None:
    limiter = Limiter(jobs_config(limit=1))

    async def one_job() -> str:
        async with guard(limiter, Job("report")) as admission:
            await asyncio.sleep(0)
            return admission.priority_level

    assert asyncio.run(one_job()) == "jobs"  # this thread's loop, then stopped
    thread, outcome = _in_thread(one_job)  # another thread's loop: allowed now
    thread.join(10)
    assert outcome == ["jobs"]
    assert asyncio.run(one_job()) == "jobs"  # and back
    assert _held(limiter) == (0, 0)


async def test_a_gate_started_from_another_threads_running_loop_is_refused() -> None:
    # Before: the second thread's start reset the gate's deadline schedule, so this thread's
    # request ran on unexpired (1.5 s past its 0.3 s deadline).
    limiter = Limiter(jobs_config(limit=4))
    gate = Gate(limiter, slow_clients=SlowClients(request_timeout=0.3))

    async def other_thread() -> str:
        with pytest.raises(RuntimeError, match="another thread") as error:
            gate.start(Job("report", tenant="b").digest)
        return str(error.value)

    started = time.monotonic()
    ticket = gate.start(Job("report", tenant="a").digest)
    thread, outcome = _in_thread(other_thread)
    error: BaseException | None = None
    try:
        await asyncio.to_thread(thread.join, 10)
        await asyncio.sleep(1.5)  # the job overruns its deadline: it must be cancelled
    except asyncio.CancelledError as cancelled:
        error = cancelled
    assert ticket.end(error) is True and ticket.reason == DEADLINE
    assert time.monotonic() - started < 1.2
    thread.join(10)  # the deadline may have cut the join above short
    assert "one event loop at a time" in outcome[0]
    level = limiter.statistics().priority_levels["jobs"]
    # The other thread's request was refused by the limiter before it arrived: never counted.
    assert (level.executing_requests, level.waiting_requests, level.dispatched) == (0, 0, 1)
