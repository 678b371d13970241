"""FakeClock, public test helper: timers fire in order, in exact integer nanoseconds."""

from __future__ import annotations

import asyncio

import pytest

from apf_limiter.testing import FakeClock


async def test_timers_fire_in_time_then_scheduling_order() -> None:
    clock = FakeClock(start=5.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(2.0, lambda: fired.append(("b", clock.now())))
    clock.call_later(1.0, lambda: fired.append(("a", clock.now())))
    clock.call_later(2.0, lambda: fired.append(("c", clock.now())))
    cancelled = clock.call_later(1.5, lambda: fired.append(("x", clock.now())))
    cancelled.cancel()
    assert clock.pending_timers == 3
    assert clock.next_deadline() == 6.0
    await clock.advance(1.999)
    assert fired == [("a", 6.0)]
    await clock.advance(0.001)
    assert fired == [("a", 6.0), ("b", 7.0), ("c", 7.0)]
    assert clock.next_deadline() is None and clock.pending_timers == 0
    with pytest.raises(ValueError, match="backwards"):
        await clock.advance(-1)


async def test_sleep_and_exact_sums_of_durations() -> None:
    clock = FakeClock()
    woke: list[int] = []

    async def sleeper() -> None:
        for _ in range(10):
            await clock.sleep(0.1)
        woke.append(clock.now_ns())

    task = asyncio.get_running_loop().create_task(sleeper())
    await clock.run_until_idle()
    await task
    assert woke == [1_000_000_000]  # ten times 0.1 s is exactly 1 s


def test_fake_clock_under_trio() -> None:
    import trio

    async def main() -> None:
        clock = FakeClock()
        done: list[float] = []

        async def sleeper() -> None:
            await clock.sleep(3)
            done.append(clock.now())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await clock.advance(2.9)
            assert done == []
            await clock.advance(0.1)
        assert done == [3.0]

    trio.run(main)
