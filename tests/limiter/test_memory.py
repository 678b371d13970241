"""Memory per queued request: the target of at most 1 KiB, and what keeps it there."""

from __future__ import annotations

import asyncio
import contextvars

from apf_limiter._clock import RealClock
from benchmarks.engine_bench import memory_per_queued_request


def test_a_queued_request_costs_at_most_1_kib_engine_and_shell_included() -> None:
    # Requests waiting in 4,096 queues, beyond what as many tasks waiting on an event cost
    # anyway: what one more queued request costs (the slope from 10,000 to 40,000). Averages
    # also carry what is paid once (1,000 flows' hands) and where global tables happen to
    # resize, which moves with whatever ran before in the process (50 bytes within this suite).
    low, high = 10_000, 40_000
    engine_low, shell_low = memory_per_queued_request(low)
    engine_high, shell_high = memory_per_queued_request(high)
    engine = (engine_high * high - engine_low * low) / (high - low)
    shell = (shell_high * high - shell_low * low) / (high - low)
    assert 0 < engine < shell <= 1024


def test_real_clock_timers_run_in_a_copy_of_the_callers_context() -> None:
    # Not in one shared context, which would save 64 bytes per waiting request's timer: a
    # shared context cannot be entered by two threads' loops at once (a timer would be
    # skipped: a leaked seat), and what an observer or log handler set in one callback would
    # show in every later one.
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def main() -> None:
        var.set("caller")
        done = asyncio.Event()

        def first() -> None:
            seen.append(var.get())
            var.set("set by a callback")

        def second() -> None:
            seen.append(var.get())
            done.set()

        clock = RealClock()
        clock.call_later(0.0, first)
        clock.call_later(0.0, second)
        await done.wait()

    asyncio.run(main())
    assert seen == ["caller", "caller"]
