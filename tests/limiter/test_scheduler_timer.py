"""Due work on a timer: a quiet server applies a changed configuration file (issue 28, item 3).

The scheduler arms one event-loop timer for its timed jobs (the file's checks). The fake-clock
tests move time without any request: only the timer can start the checks. Each waits for the
worker thread (``_reloader.wait()``) so every step is deterministic.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import trio

from apf_limiter import Limiter
from apf_limiter.limiter._scheduler import MIN_TIMER_DELAY, NEVER
from apf_limiter.observability import dashboard_feed
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def _write(path: Path, limit: int) -> None:
    """Replace the file at once (a rename), as editors and config management do."""
    new = path.with_suffix(".new")
    new.write_text(json.dumps(single_level_config(limit=limit)))
    os.replace(new, path)


def _server_limit(limiter: Limiter) -> int:
    return limiter.config.server_concurrency_limit


async def _quiet_interval(clock: FakeClock, limiter: Limiter) -> None:
    """One check interval with no request: the timer starts the check, then collects it."""
    await clock.advance(1.0)
    limiter._reloader.wait()  # type: ignore[union-attr]
    await clock.advance(MIN_TIMER_DELAY)


async def test_a_quiet_server_applies_a_changed_file_after_the_interval(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    clock = FakeClock()
    limiter = Limiter.from_file(path, reload=True, reload_interval=1.0, clock=clock)
    scheduler = limiter._core.scheduler
    assert scheduler.timer_due == 1.0  # armed by the construction itself: the loop runs
    _write(path, 7)
    await _quiet_interval(clock, limiter)  # the new stat is seen
    assert _server_limit(limiter) == 2
    await _quiet_interval(clock, limiter)  # it stayed: read, and applied
    assert _server_limit(limiter) == 7
    assert limiter.statistics().priority_levels["test"].dispatched == 0  # no request
    assert clock.pending_timers == 1  # the one timer, for the next check
    limiter.close()
    assert scheduler.timer_due == NEVER and clock.pending_timers == 0


async def test_no_timer_when_nothing_timed_is_due() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(), clock=clock)
    limiter.run_due()
    assert limiter._core.scheduler.timer_due == NEVER
    assert clock.pending_timers == 0


async def test_without_reload_no_timer(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    clock = FakeClock()
    limiter = Limiter.from_file(path, clock=clock)
    limiter.run_due()
    assert limiter._core.scheduler.timer_due == NEVER
    assert clock.pending_timers == 0


def test_without_a_loop_the_first_call_in_one_arms_the_timer(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    clock = FakeClock()
    # Built at import time, as a module-level app is: no loop, so no timer yet.
    limiter = Limiter.from_file(path, reload=True, reload_interval=1.0, clock=clock)
    assert clock.pending_timers == 0
    limiter.run_due()  # synchronous code: the checks wait for the next call, as before
    assert clock.pending_timers == 0

    async def main() -> None:
        limiter.run_due()  # what the middleware does at lifespan startup
        assert limiter._core.scheduler.timer_due == 1.0
        _write(path, 5)
        await _quiet_interval(clock, limiter)
        await _quiet_interval(clock, limiter)
        assert _server_limit(limiter) == 5
        limiter.close()

    asyncio.run(main())


def test_under_trio_a_quiet_limiter_applies_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)

    async def main() -> None:
        clock = FakeClock()
        limiter = Limiter.from_file(path, reload=True, reload_interval=1.0, clock=clock)
        _write(path, 4)
        await _quiet_interval(clock, limiter)
        await _quiet_interval(clock, limiter)
        assert _server_limit(limiter) == 4
        limiter.close()
        assert clock.pending_timers == 0

    trio.run(main)


def test_under_trio_the_real_clock_timer_runs_the_checks(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)

    async def main() -> None:
        limiter = Limiter.from_file(path, reload=True, reload_interval=0.05)
        _write(path, 3)
        with trio.fail_after(10):  # bounded; a change shows within 2-3 intervals
            while _server_limit(limiter) != 3:
                await trio.sleep(0.02)
        limiter.close()  # cancels the timer's system task: the run can end

    trio.run(main)


def test_the_dashboard_runs_the_due_work_first(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    clock = FakeClock()
    # Outside any loop: no timer, and no request; only the reads themselves run the checks.
    limiter = Limiter.from_file(path, reload=True, reload_interval=1.0, clock=clock)
    _write(path, 6)
    for _ in range(2):
        asyncio.run(clock.advance(1.0))
        dashboard_feed(limiter)  # starts the check
        limiter._reloader.wait()  # type: ignore[union-attr]
        feed = dashboard_feed(limiter)  # collects and applies it, then reads
    assert feed["server_concurrency_limit"] == 6
    assert clock.pending_timers == 0
