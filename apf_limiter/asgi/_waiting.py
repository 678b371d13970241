"""Waiting in a queue while watching for the client to go away, without losing its body.

The middleware starts an admission with :meth:`Admission.start`, which never waits: when seats
are free that is all, and nothing here runs (no task, no ``receive``). Only a request that has
to wait comes here. It waits (:meth:`Admission.wait`) in its own task while one helper task
reads ``receive()``:

* ``http.disconnect`` / ``websocket.disconnect``: the wait is cancelled, which takes the request
  out of its queue, and the application never runs.
* any other message (body chunks, ``websocket.connect``) is kept, to be replayed to the
  application in order before its own ``receive()`` calls reach the server.

Once the kept messages reach ``max_buffer`` bytes (each body's length plus a fixed charge per
message, so that a flood of tiny or empty messages is bounded too) the helper stops reading:
the rest of the body stays with the server (flow control pushes back on the client) and the
request waits on without disconnect detection.

When the wait ends, a ``receive()`` the helper has in flight is cancelled once the body is
complete: then only a disconnect could come, and every server's wait for it is cancel-safe.
While more body is due (under asyncio), the call is not cancelled but handed over: it runs in
a task of its own, and the application's first ``receive()`` after the kept messages awaits
it. The application starts at once all the same (it may answer without reading the body), and
a ``receive`` built on an async generator (httpx's in-process transport, some wrappers), which
loses a chunk when cancelled mid-call, loses nothing. Under trio a task cannot outlive the
helper's nursery, so the call is cancelled there, as Starlette cancels its own ``receive``
calls.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import anyio

from apf_limiter._errors import Rejected
from apf_limiter.asgi._types import Message, Receive
from apf_limiter.limiter import Admission

_DISCONNECTS = frozenset({"http.disconnect", "websocket.disconnect"})

#: Bytes charged per kept message on top of its body: about what CPython spends on the
#: message dict and its bytes object (~190 B measured for a one-byte chunk), rounded up.
MESSAGE_OVERHEAD = 256


class ReplayReceive:
    """A ``receive`` that first replays the messages read while the request waited.

    Args:
        messages: The kept messages, in arrival order.
        receive: The server's ``receive``.
        error: An exception the server's ``receive`` raised while the request waited; it is
            raised again after the kept messages.
    """

    __slots__ = ("_messages", "_receive", "_error", "_pending")

    def __init__(
        self,
        messages: deque[Message],
        receive: Receive,
        error: BaseException | None,
        pending: asyncio.Future[Message] | None = None,
    ) -> None:
        self._messages = messages
        self._receive = receive
        self._error = error
        self._pending = pending

    async def __call__(self) -> Message:
        """Return the next kept message, else the server's next message."""
        if self._messages:
            return self._messages.popleft()
        error = self._error
        if error is not None:
            self._error = None
            raise error
        pending = self._pending
        if pending is not None:
            # The server's receive() that was in flight when the wait ended: its message
            # comes next.
            self._pending = None
            return await pending
        return await self._receive()

    def close(self) -> None:
        """Cancel a handed-over ``receive()`` the application never awaited (it is done)."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            pending.cancel()
            if pending.done() and not pending.cancelled():
                pending.exception()  # retrieved: no "exception was never retrieved" warning


@dataclass(slots=True)
class Waited:
    """How a queued request's wait ended.

    Attributes:
        entered: The admission was entered (the request holds its seats).
        rejected: The admission raised this instead (``None`` otherwise).
        disconnected: The client went away while the request waited.
        receive: The ``receive`` for the application (replays what was read while waiting).
    """

    entered: bool
    rejected: Rejected | None
    disconnected: bool
    receive: Receive


class _Watcher:
    __slots__ = (
        "receive",
        "max_buffer",
        "messages",
        "disconnected",
        "error",
        "scope",
        "complete",
        "pending",
        "handed_over",
    )

    def __init__(self, receive: Receive, max_buffer: int) -> None:
        self.receive = receive
        self.max_buffer = max_buffer
        self.messages: deque[Message] = deque()
        self.disconnected = False
        self.error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None
        # The body is complete (or the WebSocket's connect came): a receive() now waits only
        # for a disconnect, and may be cancelled.
        self.complete = False
        # Under asyncio, the receive() in flight, in a task of its own (see the module docs).
        self.pending: asyncio.Future[Message] | None = None
        self.handed_over = False

    async def run(self) -> None:
        kept = 0
        detach = _running_asyncio()
        while kept < self.max_buffer:
            try:
                if detach:
                    pending = self.pending = asyncio.ensure_future(_call(self.receive))
                    try:
                        message = await asyncio.shield(pending)
                    except BaseException:
                        if not self.handed_over:
                            pending.cancel()  # not wanted any more: a cancel-safe wait
                        raise
                    self.pending = None
                else:
                    message = await self.receive()
            except Exception as exc:  # the application will meet it at its own receive()
                self.error = exc
                return
            kind = message.get("type")
            if kind in _DISCONNECTS:
                self.disconnected = True
                if self.scope is not None:
                    self.scope.cancel()
                return
            self.messages.append(message)
            kept += _size(message) + MESSAGE_OVERHEAD
            if kind == "websocket.connect" or not message.get("more_body", False):
                self.complete = True

    def hand_over(self, entered: bool) -> asyncio.Future[Message] | None:
        """The ``receive()`` in flight, for the application, if more body is due; else None."""
        pending = self.pending
        if entered and pending is not None and not self.complete:
            self.handed_over = True
            return pending
        return None


async def _call(receive: Receive) -> Message:
    return await receive()


def _running_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False  # trio (or another event loop)
    return True


def _size(message: Message) -> int:
    data = message.get("body") or message.get("bytes") or message.get("text") or b""
    return len(data)


async def wait_watching_disconnect(
    admission: Admission, receive: Receive, max_buffer: int
) -> Waited:
    """Wait for a queued admission's seats while watching ``receive`` for a disconnect.

    Args:
        admission: An admission whose :meth:`~Admission.start` returned ``False``.
        receive: The server's ``receive``.
        max_buffer: Bytes to keep at most before the watching stops (each message's body
            plus :data:`MESSAGE_OVERHEAD`); 0 watches nothing: ``receive`` is not called.

    Returns:
        How the wait ended. Exceptions other than :class:`Rejected` (a cancellation of the
        request's task, say) propagate after the request left its queue.
    """
    watcher = _Watcher(receive, max_buffer)
    entered = False
    rejected: Rejected | None = None
    pending: asyncio.Future[Message] | None = None
    async with anyio.create_task_group() as group:
        watcher.scope = group.cancel_scope
        group.start_soon(watcher.run)
        try:
            await admission.wait()
            entered = True
        except Rejected as exc:
            rejected = exc
        pending = watcher.hand_over(entered)
        group.cancel_scope.cancel()
    if watcher.messages or watcher.error is not None or pending is not None:
        receive = ReplayReceive(watcher.messages, receive, watcher.error, pending)
    return Waited(entered, rejected, watcher.disconnected, receive)
