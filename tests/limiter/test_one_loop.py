"""A limiter serves one event loop at a time: a request from another thread's running loop is
refused as it starts, whatever the front door; a stopped loop hands the limiter over.

Real threads, each with its own ``asyncio.run``, and the real clock; bounded to seconds.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from tests.helpers import single_level_config

pytestmark = pytest.mark.timeout(30)


def _other_thread(limiter: Limiter) -> list[Any]:
    """Admit one request through ``limiter`` from a new thread's own loop; what came of it."""
    outcome: list[Any] = []

    async def admit() -> str:
        admission = limiter.admit(RequestDigest(user="other"))
        async with admission:
            return admission.priority_level

    def run() -> None:
        try:
            outcome.append(asyncio.run(admit()))
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    return outcome


async def test_limiter_admit_from_another_threads_running_loop_is_refused_uncounted() -> None:
    # Before: the other thread's request queued behind the held seat; the release below woke
    # its future from this thread, which its loop noticed only at its wait limit (5 s).
    limiter = Limiter(single_level_config(limit=1, wait_limit=5))
    async with limiter.admit(RequestDigest(user="here")):
        (refused,) = await asyncio.to_thread(_other_thread, limiter)
    assert isinstance(refused, RuntimeError)
    assert "one event loop at a time" in str(refused)
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests, level.dispatched) == (0, 0, 1)
    assert sum(level.rejected.values()) == 0  # refused before it arrived: not counted


def test_a_stopped_loop_hands_the_limiter_over() -> None:
    limiter = Limiter(single_level_config(limit=1))

    async def one() -> None:
        async with limiter.admit(RequestDigest(user="u")):
            await asyncio.sleep(0)

    asyncio.run(one())  # this thread's loop, then stopped
    assert _other_thread(limiter) == ["test"]  # another thread's: allowed now
    asyncio.run(one())  # and back
    admission = limiter.admit(RequestDigest(user="u"))
    assert admission.start() is True  # outside any loop: not checked
    admission.release()
    assert limiter.statistics().priority_levels["test"].dispatched == 4
