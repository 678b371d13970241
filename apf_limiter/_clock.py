"""The one seam where real time enters: reading the time, timers, and waiting.

The engine never reads a clock; the :class:`~apf_limiter.Limiter` asks its clock. The real
clock uses :func:`time.monotonic` and the running event loop (asyncio or trio);
:class:`apf_limiter.testing.FakeClock` implements the same protocol in fake time.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Timer(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None:
        """Stop the callback from running (no effect if it already ran)."""


class Clock(Protocol):
    """The time source of a :class:`~apf_limiter.Limiter`."""

    def now(self) -> float:
        """Return the current time in seconds (monotonic)."""

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        """Run ``callback(*args)`` (synchronously, in the event loop) after ``delay`` seconds."""


class Wakeable(Protocol):
    """What the shell tells a waiting request's handle when it is dispatched or times out."""

    def set(self) -> bool:
        """Tell it; ``False`` when nobody can be told any more (see :meth:`Waiter.set`)."""


class Waiter(Protocol):
    """A one-shot wake-up signal for one waiting task."""

    def set(self) -> bool:
        """Wake the waiting task (idempotent).

        Returns:
            ``False`` when the waiting task cannot be woken: its event loop was closed while
            the task still waited (a loop closed without cancelling its tasks). ``True``
            otherwise, which does not promise that the task will run: its loop may still
            close before it does.
        """

    def wait(self) -> Awaitable[Any]:
        """Return an awaitable that completes once :meth:`set` is called.

        Raises:
            RuntimeError: If it was called before: one task waits, and cancelling it must
                not cancel (asyncio) or strand (trio) another.
        """


class _OneWaiter:
    """What both backends' waiters share: one task waits."""

    __slots__ = ("_waited",)

    def __init__(self) -> None:
        self._waited = False

    def _claim(self) -> None:
        if self._waited:
            raise RuntimeError("another task is already waiting for this admission")
        self._waited = True


class _AsyncioWaiter(_OneWaiter):
    __slots__ = ("_future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._future: asyncio.Future[None] = loop.create_future()

    def set(self) -> bool:
        future = self._future
        if not future.done():
            try:
                future.set_result(None)
            except RuntimeError:
                # Scheduling the waiting task's wake-up failed: its loop is closed, the task
                # will never run again (anything else is not ours to hide).
                if not future.get_loop().is_closed():
                    raise
                return False
        return not future.get_loop().is_closed()

    def wait(self) -> Awaitable[None]:
        self._claim()
        # The future itself: no coroutine frame per waiting request.
        return self._future


class _TrioWaiter(_OneWaiter):
    __slots__ = ("_event",)

    def __init__(self) -> None:
        import trio

        super().__init__()
        self._event = trio.Event()

    def set(self) -> bool:
        # A trio run ends only once every task in it has, so a waiting task is always alive.
        self._event.set()
        return True

    def wait(self) -> Awaitable[None]:
        self._claim()
        return self._event.wait()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def current_loop() -> object | None:
    """The running event loop (asyncio), the running trio run's token, or ``None``.

    Timers and waiters belong to the loop they were made in, and die with it.
    """
    loop = _running_loop()
    if loop is not None:
        return loop
    trio: Any = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        token: object = trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None
    return token


def _in_trio() -> bool:
    trio: Any = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def new_waiter() -> Waiter:
    """Create a waiter for the running backend (asyncio or trio).

    Raises:
        RuntimeError: If no supported event loop is running.
    """
    loop = _running_loop()
    if loop is not None:
        return _AsyncioWaiter(loop)
    if _in_trio():
        return _TrioWaiter()
    raise RuntimeError("apf_limiter needs a running asyncio or trio event loop")


class _TrioTimer:
    __slots__ = ("_scope",)

    def __init__(self, delay: float, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        import trio

        self._scope = trio.CancelScope()
        scope = self._scope

        async def run() -> None:
            with scope:
                await trio.sleep(delay)
                callback(*args)

        trio.lowlevel.spawn_system_task(run)

    def cancel(self) -> None:
        self._scope.cancel()


class RealClock:
    """The real clock: :func:`time.monotonic` and the running event loop's timers.

    On asyncio, timers are ``loop.call_later`` handles (the loop's clock is
    :func:`time.monotonic`); on trio they are small system tasks.
    """

    __slots__ = ()

    def now(self) -> float:
        """Return :func:`time.monotonic`."""
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> Timer:
        """Schedule ``callback(*args)`` after ``delay`` seconds on the running event loop.

        Raises:
            RuntimeError: If no supported event loop is running.
        """
        loop = _running_loop()
        if loop is not None:
            return loop.call_later(max(0.0, delay), callback, *args)
        if _in_trio():
            return _TrioTimer(max(0.0, delay), callback, args)
        raise RuntimeError("apf_limiter needs a running asyncio or trio event loop")

    def __repr__(self) -> str:
        return "RealClock()"
