"""Memory per queued request: the target of at most 1 KiB, and what keeps it there."""

from __future__ import annotations

import asyncio
import contextvars

from apf_limiter.clock import RealClock
from benchmarks.engine_bench import memory_per_queued_request


def test_a_queued_request_costs_at_most_1_kib_engine_and_shell_included() -> None:
    # tracemalloc counts are deterministic for one build: 10,000 requests waiting in 4,096
    # queues, beyond what 10,000 tasks waiting on an event cost anyway. The average includes
    # what is paid once per flow and per queue (1,000 flows' hands), so it is the harder bound.
    engine, shell = memory_per_queued_request(10_000)
    assert 0 < engine < shell <= 1024


def test_real_clock_timers_do_not_copy_the_callers_context() -> None:
    # Each waiting request has a wait-limit timer; asyncio would copy the caller's context
    # for each one (64 bytes) unless given one to run in.
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def main() -> None:
        var.set("caller")
        done = asyncio.Event()

        def callback() -> None:
            seen.append(var.get())
            done.set()

        RealClock().call_later(0.0, callback)
        await done.wait()

    asyncio.run(main())
    assert seen == ["unset"]
