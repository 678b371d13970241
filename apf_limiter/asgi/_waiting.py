"""Waiting in a queue while watching for the client to go away, without losing its body.

The middleware starts a request with :meth:`Gate.start`, which never waits: when seats
are free that is all, and nothing here runs (no task, no ``receive``). Only a request that has
to wait comes here. It waits (:meth:`Ticket.wait`) in its own task while one helper task
reads ``receive()``:

* ``http.disconnect`` / ``websocket.disconnect``: the wait is cancelled, which takes the request
  out of its queue, and the application never runs.
* any other message (body chunks, ``websocket.connect``) is kept, to be replayed to the
  application in order before its own ``receive()`` calls reach the server.

Once the kept messages reach ``max_buffer`` bytes (each body's length plus a fixed charge per
message, so that a flood of tiny or empty messages is bounded too) the helper stops reading:
the rest of the body stays with the server (flow control pushes back on the client) and the
request waits on without disconnect detection. The helper reads only below the bound, so it
keeps at most ``max_buffer`` bytes plus one message (whose size the server decides). The
queued requests of one middleware also share a :class:`BodyBudget`: while their kept bytes
together reach its limit, none reads any more (a request that starts waiting then is not
watched at all); bytes go back to the budget as the application is handed the kept messages,
or when they are dropped.

Under asyncio the helper is a plain task, cancelled and not waited for when the wait ends, so
the application runs in the turn after its seats came, as after an ``asyncio.Semaphore``'s
(a task group held it two turns more); under trio it runs in a task group.

When the wait ends, a ``receive()`` the helper has in flight is cancelled once the body is
complete: then only a disconnect could come, and every server's wait for it is cancel-safe.
While more body is due, the call is not cancelled but handed over: it runs in a task of its
own (under trio a system task, which, unlike a task of the helper's nursery, may outlive it),
and the application's first ``receive()`` after the kept messages awaits it. The application
starts at once all the same (it may answer without reading the body), and a ``receive`` built
on an async generator (httpx's in-process transport, some wrappers), which loses a chunk when
cancelled mid-call, loses nothing. A call that completed in the very turn
the wait ended is not cancelled but read: its message is replayed, or, a disconnect, acted on
(the application never runs), since a server may report a disconnect only once (hypercorn).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

import anyio

from apf_limiter._errors import Rejected
from apf_limiter.asgi._types import Message, Receive, Scope
from apf_limiter.gate import Ticket

_DISCONNECTS = frozenset({"http.disconnect", "websocket.disconnect"})

#: Bytes charged per kept message on top of its body: about what CPython spends on the
#: message dict and its bytes object (~190 B measured for a one-byte chunk), rounded up.
MESSAGE_OVERHEAD = 256


def charge(message: Message) -> int:
    """The bytes a kept message counts: its body (or WebSocket data) plus the overhead."""
    data = message.get("body") or message.get("bytes") or message.get("text") or b""
    return len(data) + MESSAGE_OVERHEAD


class BodyBudget:
    """The bytes kept by all queued requests of one middleware, against a limit.

    Args:
        limit: Kept bytes at which no queued request reads any more.

    Attributes:
        kept: Bytes kept now (each message charged as :func:`charge` says).
        peak: The most ever kept at once (for tests and measurements).
        largest: The largest message ever kept (its charge).
    """

    __slots__ = ("limit", "kept", "peak", "largest")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = 0
        self.peak = 0
        self.largest = 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes kept (one message's)."""
        kept = self.kept = self.kept + size
        self.peak = max(self.peak, kept)
        self.largest = max(self.largest, size)

    def give_back(self, messages: deque[Message]) -> None:
        """The kept ``messages`` are dropped: their bytes go back (and the deque is emptied)."""
        for message in messages:
            self.kept -= charge(message)
        messages.clear()


def headers_say_body(scope: Scope) -> tuple[bool, bool]:
    """Whether a request declares a body, and whether it expects ``100 Continue`` for it.

    A body is declared by ``Content-Length`` above 0 or any ``Transfer-Encoding``. ``Expect``
    is a comma-separated list (RFC 9110), matched without regard to case or spaces.

    Args:
        scope: An ``http`` scope (ASGI header names are lower-case).

    Returns:
        ``(body, continue)``.
    """
    body = expect = False
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            body = body or _positive(value)
        elif name == b"transfer-encoding":
            body = True
        elif name == b"expect":
            expect = expect or any(
                item.strip().lower() == b"100-continue" for item in value.split(b",")
            )
    return body, expect


def body_expected(scope: Scope) -> bool:
    """Whether an HTTP request may have a body (a cheap check, made on every request).

    HTTP/1 requests declare theirs (``Content-Length`` above 0, ``Transfer-Encoding``); an
    HTTP/2 or HTTP/3 request may have one without either.
    """
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return _positive(value)
        if name == b"transfer-encoding":
            return True
    return not str(scope.get("http_version", "1.1")).startswith("1")


def _positive(content_length: bytes) -> bool:
    try:
        return int(content_length) > 0
    except ValueError:
        return True  # unparsable: the server decides; it may be a body


class ReplayReceive:
    """A ``receive`` that first replays the messages read while the request waited.

    Args:
        messages: The kept messages, in arrival order.
        receive: The server's ``receive``.
        error: An exception the server's ``receive`` raised while the request waited; it is
            raised again after the kept messages.
    """

    __slots__ = ("_messages", "_receive", "_error", "_pending", "_budget")

    def __init__(
        self,
        messages: deque[Message],
        receive: Receive,
        error: BaseException | None,
        pending: Pending | None = None,
        budget: BodyBudget | None = None,
    ) -> None:
        self._messages = messages
        self._receive = receive
        self._error = error
        self._pending = pending
        self._budget = budget

    async def __call__(self) -> Message:
        """Return the next kept message, else the server's next message."""
        if self._messages:
            message = self._messages.popleft()
            if self._budget is not None:
                self._budget.kept -= charge(message)
            return message
        error = self._error
        if error is not None:
            self._error = None
            raise error
        pending = self._pending
        if pending is not None:
            # The server's receive() that was in flight when the wait ended: its message
            # comes next.
            self._pending = None
            return await _await_pending(pending)
        return await self._receive()

    def close(self) -> None:
        """The request is done: drop what was not replayed, cancel a call never awaited."""
        if self._budget is not None:
            self._budget.give_back(self._messages)
        _cancel(self._pending)
        self._pending = None


class TrioPending:
    """A ``receive()`` call under trio, in a system task: a future that may outlive a nursery.

    It answers what the watcher asks of an asyncio future (``done``, ``cancelled``,
    ``exception``, ``result``, ``cancel``), and :meth:`wait` awaits the message.
    """

    __slots__ = ("_event", "_scope", "_message", "_error", "_done", "_cancelled")

    def __init__(self, receive: Receive) -> None:
        import trio

        self._event = trio.Event()
        self._scope = trio.CancelScope()
        self._message: Message | None = None
        self._error: BaseException | None = None
        self._done = False
        self._cancelled = False
        trio.lowlevel.spawn_system_task(self._run, receive)

    async def _run(self, receive: Receive) -> None:
        try:
            with self._scope:
                try:
                    self._message = await receive()
                except Exception as exc:  # the application meets it at its receive()
                    self._error = exc
        finally:
            # Cancelled by cancel() (the scope caught it), or with the run itself (it
            # propagates: a system task may end so).
            self._cancelled = self._message is None and self._error is None
            self._done = True
            self._event.set()

    def done(self) -> bool:
        """Whether the call has ended (with a message, an error, or cancelled)."""
        return self._done

    def cancelled(self) -> bool:
        """Whether the call was cancelled before it returned."""
        return self._cancelled

    def exception(self) -> BaseException | None:
        """The call's error, if it raised (``done()`` first)."""
        return self._error

    def result(self) -> Message:
        """The call's message (``done()``, and not cancelled or failed)."""
        if self._error is not None:
            raise self._error
        if self._message is None:
            raise RuntimeError("the receive() call was cancelled")
        return self._message

    def cancel(self) -> None:
        """Cancel the call (nothing if it has ended)."""
        self._scope.cancel()

    async def wait(self) -> Message:
        """Wait for the call to end; its message, or what it raised."""
        await self._event.wait()
        return self.result()


#: A ``receive()`` in flight: an asyncio future, or its trio counterpart.
Pending = Any


async def _await_pending(pending: Pending) -> Message:
    if isinstance(pending, TrioPending):
        return await pending.wait()
    message: Message = await pending
    return message


def _cancel(pending: Pending | None) -> None:
    if pending is not None:
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
        "budget",
        "messages",
        "disconnected",
        "error",
        "scope",
        "complete",
        "pending",
        "handed_over",
    )

    def __init__(self, receive: Receive, max_buffer: int, budget: BodyBudget) -> None:
        self.receive = receive
        self.max_buffer = max_buffer
        self.budget = budget
        self.messages: deque[Message] = deque()
        self.disconnected = False
        self.error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None
        # The body is complete (or the WebSocket's connect came): a receive() now waits only
        # for a disconnect, and may be cancelled.
        self.complete = False
        # The receive() in flight, in a task of its own (see the module docs).
        self.pending: Pending | None = None
        self.handed_over = False

    async def run(self) -> None:
        kept = 0
        budget = self.budget
        detach = _running_asyncio()
        # Read only below both bounds: at most one message goes past either.
        while kept < self.max_buffer and budget.kept < budget.limit:
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
                    trio_pending = TrioPending(self.receive)
                    self.pending = trio_pending
                    try:
                        message = await trio_pending.wait()
                    except BaseException:
                        if not self.handed_over:
                            trio_pending.cancel()  # not wanted any more: a cancel-safe wait
                        raise
                    self.pending = None
            except Exception as exc:  # the application will meet it at its own receive()
                self.error = exc
                return
            if self.take(message):
                if self.scope is not None:
                    self.scope.cancel()
                return
            kept += charge(message)

    def take(self, message: Message) -> bool:
        """Keep a message read, or note a disconnect; whether it was a disconnect."""
        kind = message.get("type")
        if kind in _DISCONNECTS:
            self.disconnected = True
            return True
        self.messages.append(message)
        self.budget.take(charge(message))
        if kind == "websocket.connect" or not message.get("more_body", False):
            self.complete = True
        return False

    def hand_over(self, entered: bool) -> Pending | None:
        """The ``receive()`` in flight, for the application, if more body is due; else None.

        A call that has completed already is not handed over: :meth:`take_completed` acts on
        its message.
        """
        pending = self.pending
        if entered and pending is not None and not self.complete and not pending.done():
            self.handed_over = True
            return pending
        return None

    def take_completed(self) -> None:
        """Act on a ``receive()`` that completed as the wait ended (the helper stopped).

        The wait can end in the very event-loop turn in which the server's ``receive()``
        returned: cancelling the helper then cancels nothing, and the message would be
        dropped. A server reports a disconnect once (hypercorn), so a lost one would let the
        application run for a client that left, holding its seats (and a long-running
        request its ``max_long_running`` place) for good. So its message is kept (replayed
        to the application) or, a disconnect, noted; an error is raised to the application.
        """
        pending = self.pending
        if pending is None or self.handed_over or not pending.done() or pending.cancelled():
            return  # cancelled before it completed: the server still holds its message
        self.pending = None
        error = pending.exception()
        if error is None:
            self.take(pending.result())
        elif isinstance(error, Exception):
            self.error = error

    def ended(
        self, entered: bool, rejected: Rejected | None, pending: Pending | None, receive: Receive
    ) -> Waited:
        """How the wait ended, once the helper stopped reading (``pending``: handed over)."""
        self.take_completed()
        if self.messages or self.error is not None or pending is not None:
            receive = ReplayReceive(self.messages, receive, self.error, pending, self.budget)
        return Waited(entered, rejected, self.disconnected, receive)


async def _call(receive: Receive) -> Message:
    return await receive()


def _running_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False  # trio (or another event loop)
    return True


async def wait_watching_disconnect(
    ticket: Ticket, receive: Receive, max_buffer: int, budget: BodyBudget
) -> Waited:
    """Wait for a queued admission's seats while watching ``receive`` for a disconnect.

    Args:
        ticket: A ticket not admitted at :meth:`~apf_limiter.gate.Gate.start`.
        receive: The server's ``receive``.
        max_buffer: Bytes below which the watcher reads (each message counts its body plus
            :data:`MESSAGE_OVERHEAD`): it keeps at most this plus one message; 0 watches
            nothing (``receive`` is not called).
        budget: The bytes kept by all queued requests together: none reads past its limit.

    Returns:
        How the wait ended; its ``receive`` is a :class:`ReplayReceive` (to be closed) when
        messages were kept. Exceptions other than :class:`Rejected` (a cancellation of the
        request's task, say) propagate after the request left its queue.
    """
    watcher = _Watcher(receive, max_buffer, budget)
    if _running_asyncio():
        return await _wait_asyncio(ticket, receive, watcher)
    # Under trio the helper runs in a task group: the group's exit waits for it to wind down.
    entered = False
    rejected: Rejected | None = None
    pending: Pending | None = None
    try:
        async with anyio.create_task_group() as group:
            watcher.scope = group.cancel_scope
            group.start_soon(watcher.run)
            try:
                await ticket.wait()
                entered = True
            except Rejected as exc:
                rejected = exc
            pending = watcher.hand_over(entered)
            group.cancel_scope.cancel()
    except BaseException:
        # Cancelled (a deadline, the server) as the wait ended: nobody replays what was kept,
        # nor awaits a receive() handed over.
        budget.give_back(watcher.messages)
        _cancel(pending)
        raise
    return watcher.ended(entered, rejected, pending, receive)


async def _wait_asyncio(ticket: Ticket, receive: Receive, watcher: _Watcher) -> Waited:
    # Under asyncio the helper is a plain task, cancelled but not awaited when the wait ends:
    # a task group would hold the request for two more event-loop turns (the helper's
    # cancellation, then the group's exit) before it runs, on every queued request. Nothing
    # is lost by not waiting: the helper is cancelled in this very turn, before it can run
    # again, and what it would still do (cancel its receive() unless handed over) is done
    # here.
    entered = False
    rejected: Rejected | None = None
    pending: Pending | None = None
    scope = watcher.scope = anyio.CancelScope()
    helper = asyncio.get_running_loop().create_task(watcher.run())
    try:
        with scope:
            try:
                await ticket.wait()
                entered = True
            except Rejected as exc:
                rejected = exc
        pending = watcher.hand_over(entered)
    except BaseException:
        helper.cancel()
        watcher.budget.give_back(watcher.messages)
        _cancel(watcher.pending)
        raise
    helper.cancel()
    waited = watcher.ended(entered, rejected, pending, receive)
    if pending is None:
        _cancel(watcher.pending)  # waits only for a disconnect: not wanted any more
    return waited
