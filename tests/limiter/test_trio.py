"""The limiter under trio: the same semantics as under asyncio."""

from __future__ import annotations

import trio

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def test_trio_queue_timeout_and_cancel_in_fake_time() -> None:
    async def main() -> None:
        clock = FakeClock()
        limiter = Limiter(single_level_config(limit=1, wait_limit=5), clock=clock)
        events: list[str] = []
        release = trio.Event()

        async def holder() -> None:
            async with limiter.admit(RequestDigest(user="a")):
                events.append("a runs")
                await release.wait()

        async def waiter(name: str, cancel_scope: trio.CancelScope | None = None) -> None:
            try:
                async with limiter.admit(RequestDigest(user=name)) as admission:
                    events.append(f"{name} runs after {admission.queue_wait}s")
            except Rejected as exc:
                events.append(f"{name} {exc.reason}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(holder)
            await clock.advance(0)
            nursery.start_soon(waiter, "b")
            await clock.advance(5)  # b's wait limit passes
            cancel = trio.CancelScope()

            async def cancellable() -> None:
                with cancel:
                    await waiter("c")
                events.append("c cancelled")

            nursery.start_soon(cancellable)
            nursery.start_soon(waiter, "d")
            await clock.advance(1)
            cancel.cancel()
            await clock.advance(1)
            release.set()
            await clock.advance(0)
        assert events == ["a runs", "b time-out", "c cancelled", "d runs after 2.0s"]
        level = limiter.statistics().priority_levels["test"]
        assert (level.executing_requests, level.waiting_requests) == (0, 0)
        assert (level.timed_out, level.cancelled, level.dispatched) == (1, 1, 2)

    trio.run(main)


def test_trio_real_clock_wait_limit() -> None:
    async def main() -> None:
        limiter = Limiter(single_level_config(limit=1))
        async with limiter.admit(RequestDigest(user="a")):
            start = trio.current_time()
            try:
                async with limiter.admit(RequestDigest(user="b"), wait_limit=0.05):
                    raise AssertionError("must not run")
            except Rejected as exc:
                assert exc.reason == "time-out"
            assert trio.current_time() - start >= 0.04

    trio.run(main)
