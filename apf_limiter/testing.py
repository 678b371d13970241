"""Test helpers, public for users' own tests: :class:`FakeClock`.

With a ``FakeClock`` every timing behaviour of a :class:`~apf_limiter.Limiter` (wait limits,
additional latency, the borrowing schedule) happens in fake time, so a whole overload scenario
runs deterministically in milliseconds::

    clock = FakeClock()
    limiter = Limiter(config, clock=clock)
    ...
    await clock.advance(15)   # every timer due in the next 15 s fires, in order
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import sys
from collections.abc import Callable
from typing import Any

from apf_limiter._clock import new_waiter

__all__ = ["FakeClock"]


class _FakeTimer:
    __slots__ = ("when", "callback", "args", "cancelled")

    def __init__(self, when: int, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that only moves when told to.

    Args:
        start: The initial time, in seconds.

    ``advance`` fires each due timer in time order (ties in scheduling order), setting
    :meth:`now` to the timer's time first, and after each one lets the woken tasks run until
    they all wait again. Works under asyncio and trio.

    Time is kept in integer nanoseconds, so sums of durations are exact (``now()`` converts
    to float seconds; :meth:`now_ns` gives the exact value).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = _ns(start)
        self._timers: list[tuple[int, int, _FakeTimer]] = []
        self._sequence = itertools.count()

    def now(self) -> float:
        """Return the fake current time, in seconds."""
        return self._now / 1e9

    def now_ns(self) -> int:
        """Return the fake current time, in integer nanoseconds."""
        return self._now

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> _FakeTimer:
        """Schedule ``callback(*args)`` to run when fake time reaches ``now() + delay``."""
        timer = _FakeTimer(self._now + max(0, _ns(delay)), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._sequence), timer))
        return timer

    @property
    def pending_timers(self) -> int:
        """How many scheduled timers have neither fired nor been cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def next_deadline(self) -> float | None:
        """Return the time (seconds) of the earliest pending timer, or ``None``."""
        when = self._next_deadline_ns()
        return None if when is None else when / 1e9

    def _next_deadline_ns(self) -> int | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing due timers and letting tasks run.

        Raises:
            ValueError: If ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError(f"cannot move time backwards ({seconds} s)")
        await self._advance_to_ns(self._now + _ns(seconds))

    async def advance_to(self, when: float) -> None:
        """Move time forward to ``when`` seconds (no effect if it is in the past)."""
        await self._advance_to_ns(_ns(when))

    async def run_until_idle(self, limit: float = 1e9) -> None:
        """Fire timers in order until none is left (or fake time passes ``now() + limit``).

        This moves fake time forward to every pending timer, wait limits and sleeps included;
        ``await advance(0)`` lets ready tasks run without moving time.
        """
        end = self._now + _ns(limit)
        await settle()
        while True:
            deadline = self._next_deadline_ns()
            if deadline is None or deadline > end:
                break
            await self._advance_to_ns(deadline)

    async def _advance_to_ns(self, when: int) -> None:
        await settle()
        while True:
            deadline = self._next_deadline_ns()
            if deadline is None or deadline > when:
                break
            _, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, timer.when)
            timer.callback(*timer.args)
            await settle()
        self._now = max(self._now, when)
        await settle()

    async def sleep(self, seconds: float) -> None:
        """Wait until fake time has moved ``seconds`` forward."""
        waiter = new_waiter()

        def wake() -> None:
            waiter.set()

        timer = self.call_later(seconds, wake)
        try:
            await waiter.wait()
        finally:
            timer.cancel()

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now()!r}, pending_timers={self.pending_timers})"


def _ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


async def settle() -> None:
    """Let every other task run until all of them are blocked.

    Under asyncio this yields to the loop until no other task is runnable and no callback is
    ready; under trio it is :func:`trio.testing.wait_all_tasks_blocked`.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio: Any = sys.modules.get("trio")
        if trio is None:
            raise
        import trio.testing

        await trio.testing.wait_all_tasks_blocked()
        return
    ready = getattr(loop, "_ready", None)
    quiet_rounds = 0
    # Two quiet rounds in a row: a woken task may schedule a callback that wakes another.
    while quiet_rounds < 2:
        await asyncio.sleep(0)
        # Every runnable task has its next step in the loop's ready queue, so an empty
        # queue means every other task is blocked; loops without one get the slow scan.
        busy = bool(ready) if ready is not None else _any_task_runnable()
        quiet_rounds = 0 if busy else quiet_rounds + 1


def _any_task_runnable() -> bool:
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is current:
            continue
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is None or waiter.done():
            return True
    return False
