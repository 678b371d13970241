"""APFInterceptor: Kubernetes API Priority and Fairness in front of a ``grpc.aio`` server.

This module maps gRPC onto the request gate (:mod:`apf_limiter.gate`), which implements the
life of a request once. Per call: classify it from its context
(:mod:`apf_limiter.grpc._call`), start it through the gate (never waits), wait in a queue
only if it must (no longer than the call's own deadline: :class:`ClientDeadlines`), run the
handler holding the seats, and end the ticket however the call ends. A refusal is
``RESOURCE_EXHAUSTED`` with ``grpc-retry-pushback-ms`` in the trailing metadata; a request
deadline that passes (``request_timeout``) is ``DEADLINE_EXCEEDED``. A call cancelled while it
waits (its client left, its deadline passed) is cancelled by gRPC itself: the gate's ticket
then gives up its place and holds nothing.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeAlias

import grpc

from apf_limiter._errors import Rejected
from apf_limiter.gate import ClientDeadlines, Gate, SlowClients, Ticket
from apf_limiter.grpc._call import (
    FLOW_SCHEMA_KEY,
    PRIORITY_LEVEL_KEY,
    IdentifyHook,
    add_names,
    call_digest,
    rejection_metadata,
)
from apf_limiter.limiter import Limiter

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_INF: Final = float("inf")
_MAX_METHODS: Final = 4096  # wrapped handlers kept: a catch-all generic handler serves any name
# Longer method names are wrapped for each call, not kept: a real one ("/package.Service/Method")
# is far shorter, and a client sending distinct long names to a catch-all handler would
# otherwise fill the cache with them (4,096 names of 6 KB: about 30 MB).
_MAX_KEPT_NAME: Final = 256


class APFInterceptor(grpc.aio.ServerInterceptor):
    """A ``grpc.aio`` server interceptor that admits calls through API Priority and Fairness.

    Use it as ``grpc.aio.server(interceptors=[APFInterceptor(config=...)])``. Every kind of
    method is admitted (unary and streaming, requests and responses); handlers are ``async``
    functions or async generators (a sync handler, which gRPC would run in its thread pool,
    is refused: each call to it ends ``UNKNOWN`` with a ``TypeError`` naming it). A call is
    a non-resource request with the verb ``post`` and the method's full name as its path
    (``/package.Service/Method``). See ``docs/grpc.md``.

    Args:
        limiter: The limiter to admit calls through (shared, e.g. with a metrics endpoint).
        config: The configuration of a limiter the interceptor creates (``None`` and no
            ``limiter``: the built-in configuration). Not together with ``limiter``.
        identify: ``identify(context)``: the caller's user name, or ``(user, groups)``, or
            ``None`` for anonymous (e.g. read from the ``authorization`` metadata).
        long_running: The full names of the long-running methods (or a predicate on the
            name): their seats go back as their response starts (the first message of a
            response stream served by an async generator; otherwise as the handler starts),
            and their request deadline ends then.
        wait_limit: Seconds a call may wait in a queue, at most 60 (Kubernetes' cap);
            ``None``: the configuration's ``requestWaitLimit``.
        request_timeout: Seconds from arrival (queue wait included) after which a call that is
            not long-running is cancelled and answered ``DEADLINE_EXCEEDED``; ``None``: none.
        max_long_running: Caps on open long-running calls by flow-schema name (``"*"``: each
            schema not named); one more is refused (``long-running-limit``).
        metadata: Add the flow schema, priority level, queue wait (and shadow outcome) to the
            trailing metadata of every admitted call.
        client_deadlines: Queues that respect client deadlines (on by default): a call waits
            no longer than its own deadline (``grpc-timeout``), nor its ``request_timeout``
            if ``client_deadlines.request_timeout``; the wait ends as a ``time-out``
            (``RESOURCE_EXHAUSTED``). ``None``: Kubernetes' wait limit alone (gRPC cancels
            a call whose deadline passes while it waits).

    Attributes:
        gate: The request gate this interceptor maps gRPC onto.

    Raises:
        ValueError: On contradicting or out-of-range arguments.
        ConfigError: If ``config`` is invalid.
    """

    def __init__(
        self,
        *,
        limiter: Limiter | None = None,
        config: ConfigSource | None = None,
        identify: IdentifyHook | None = None,
        long_running: Collection[str] | Callable[[str], bool] | None = None,
        wait_limit: float | None = None,
        request_timeout: float | None = 60.0,
        max_long_running: Mapping[str, int] | None = None,
        metadata: bool = True,
        client_deadlines: ClientDeadlines | None = ClientDeadlines(),  # noqa: B008 - frozen
    ) -> None:
        if limiter is not None and config is not None:
            raise ValueError("give APFInterceptor a limiter or a config, not both")
        if isinstance(long_running, str):
            raise ValueError(f"long_running must be a collection of names, got {long_running!r}")
        self._limiter = limiter if limiter is not None else Limiter(config)
        self.gate: Final = Gate(
            self._limiter,
            wait_limit=wait_limit,
            slow_clients=SlowClients(request_timeout=request_timeout, min_body_rate=None),
            max_long_running=max_long_running,
        )
        self._identify = identify
        if long_running is None or callable(long_running):
            self._long_running = long_running
        else:
            self._long_running = frozenset(long_running).__contains__
        self._metadata = metadata
        if client_deadlines is not None and not isinstance(client_deadlines, ClientDeadlines):
            raise TypeError(f"client_deadlines must be a ClientDeadlines, got {client_deadlines!r}")
        self._client_deadlines = client_deadlines
        self._handlers: dict[str, tuple[Handler, Handler]] = {}

    @property
    def limiter(self) -> Limiter:
        """The limiter calls are admitted through."""
        return self._limiter

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        """The method's handler, wrapped to admit each call (``None``: unknown method)."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        known = self._handlers.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(handler, method)
        if len(method) <= _MAX_KEPT_NAME:
            if len(self._handlers) >= _MAX_METHODS:
                self._handlers.clear()
            self._handlers[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: Handler, method: str) -> Handler:
        own = (
            handler.unary_unary
            or handler.stream_unary
            or handler.unary_stream
            or handler.stream_stream
        )
        if not (inspect.iscoroutinefunction(own) or inspect.isasyncgenfunction(own)):
            # gRPC runs such a handler in its thread pool, with a synchronous context
            # (_is_async_handler in grpc's aio/server.pyx.pxi). Called from this async wrapper
            # it ran on the event loop, blocking every call, and its context.abort() was a
            # coroutine never awaited: an aborted call was answered OK.
            raise TypeError(
                f"APFInterceptor admits async handlers only: {method} is served by "
                f"{own!r}, which gRPC would run in its thread pool; make it an 'async def' "
                "function or an async generator"
            )
        marked = self._long_running is not None and bool(self._long_running(method))
        parse, serialize = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary is not None:
            behavior = self._unary(handler.unary_unary, method, marked)
            return grpc.unary_unary_rpc_method_handler(behavior, parse, serialize)
        if handler.stream_unary is not None:
            behavior = self._unary(handler.stream_unary, method, marked)
            return grpc.stream_unary_rpc_method_handler(behavior, parse, serialize)
        if handler.unary_stream is not None:
            stream = self._stream(handler.unary_stream, method, marked)
            return grpc.unary_stream_rpc_method_handler(stream, parse, serialize)
        if handler.stream_stream is not None:
            stream = self._stream(handler.stream_stream, method, marked)
            return grpc.stream_stream_rpc_method_handler(stream, parse, serialize)
        return handler  # pragma: no cover - gRPC handlers have one behavior

    def _unary(
        self, behavior: Callable[..., Any], method: str, long_running: bool
    ) -> Callable[[Any, Context], Awaitable[Any]]:
        """A call with one response: admitted before the handler, ended as it returns."""
        enter, names = self._enter, self._metadata

        async def admitted(request: Any, context: Context) -> Any:
            ticket = await enter(context, method, long_running)
            error: BaseException | None = None
            response = None
            try:
                if long_running:
                    ticket.response_started()
                response = behavior(request, context)
                if inspect.isawaitable(response):
                    response = await response
            except BaseException as exc:  # every way the call ends ends the ticket
                error = exc
            await _ended(context, ticket, error, names)
            return response

        return admitted

    def _stream(
        self, behavior: Callable[..., Any], method: str, long_running: bool
    ) -> Callable[[Any, Context], Awaitable[None]]:
        """A call with a response stream: its response starts with its first message.

        The wrapper writes the handler's messages itself (``context.write``), so that a write
        waiting on a slow reader is inside its ``try``. Yielded to gRPC, a message was written
        by gRPC's own loop (``_finish_handler_with_stream_responses``, grpc's
        ``aio/server.pyx.pxi``): a cancellation there (the request deadline, the client gone)
        left the wrapper suspended at its ``yield``, the call whose deadline passed was never
        answered, and the seats came back only when the abandoned generator was finalised.
        """
        enter, names = self._enter, self._metadata

        async def admitted(request: Any, context: Context) -> None:
            ticket = await enter(context, method, long_running)
            error: BaseException | None = None
            try:
                responses = behavior(request, context)
                if hasattr(responses, "__aiter__"):  # an async generator
                    await _write_all(responses, context, ticket, long_running)
                else:  # writes with context.write(): the stream is open as it starts
                    if long_running:
                        ticket.response_started()
                    await responses
            except BaseException as exc:
                error = exc
            await _ended(context, ticket, error, names)

        return admitted

    async def _enter(self, context: Context, method: str, long_running: bool) -> Ticket:
        """Start a call through the gate and wait for its seats, or abort it (one for all kinds).

        Returns:
            The ticket of a call that holds its seats (end it with ``ticket.end``).
        """
        gate = self.gate
        client: float | None = None
        deadlines = self._client_deadlines
        if deadlines is not None:
            # Kubernetes derives the wait limit from the request's deadline too
            # (getRequestWaitContext in apiserver/pkg/server/filters/priority-and-fairness.go:
            # a quarter of it); here the whole of it bounds the wait (docs/gate.md).
            own = None if deadlines.request_timeout else _INF
            client = gate.client_wait(own, context.time_remaining())
        try:
            ticket = gate.start(
                call_digest(context, method, self._identify), long_running, None, client
            )
        except Rejected as rejected:
            await refuse(context, rejected)
        if ticket.admitted:
            return ticket
        try:
            await ticket.wait()
        except BaseException as exc:
            # The wait limit passed (Rejected), or the call was cancelled or expired.
            if ticket.end(exc):
                await deadline_passed(context, ticket)
            if isinstance(exc, Rejected):
                await refuse(context, exc)
            raise
        return ticket

    def __repr__(self) -> str:
        return f"<APFInterceptor {self._limiter!r}>"


async def _ended(
    context: Context, ticket: Ticket, error: BaseException | None, names: bool
) -> None:
    """End a call's ticket as its handler ended (errors, cancellation and aborts included).

    Answers ``DEADLINE_EXCEEDED`` when the request deadline cut the handler short, re-raises
    the handler's error otherwise, and adds the ``names`` metadata to a call that succeeded.
    """
    if ticket.end(error):  # expired: the cancellation it caused ends here
        await deadline_passed(context, ticket)
    if error is not None:
        raise error
    if names:
        add_names(context, ticket)


async def _write_all(
    responses: AsyncIterator[Any], context: Context, ticket: Ticket, long_running: bool
) -> None:
    """Write every message of a handler's response stream; close it however the writing ends.

    Args:
        responses: The handler's async generator (or async iterator).
        context: The call's context, whose ``write`` sends one message.
        ticket: The call's ticket.
        long_running: Its response starts with the first message (its seats go back then).
    """
    write = context.write
    first = True
    try:
        async for message in responses:
            if first:
                first = False
                if long_running:
                    ticket.response_started()
                if ticket.tracked:  # its deadline may yet cancel a write
                    await _send_headers(context)
            await write(message)
    finally:
        # A write that failed (cancelled, client gone) leaves the handler suspended at its
        # yield: close it here, so that its own cleanup runs in this task, seats still held,
        # not later in a task of the garbage collector's. A no-op once it is exhausted.
        close = getattr(responses, "aclose", None)
        if close is not None:
            await close()


async def _send_headers(context: Context) -> None:
    """Send the initial metadata before the first message, to the end even if cancelled.

    gRPC marks them sent only once the batch that carries them completes: a first write
    cancelled before that (the request deadline) left them pending yet unmarked, the status
    that answers the deadline was sent with them again, gRPC refused the batch
    (``GRPC_CALL_ERROR_TOO_MANY_OPERATIONS``) and the call was never answered. Sent on their
    own, they need no reader, so this waits for them even when cancelled.
    """
    sending = asyncio.ensure_future(context.send_initial_metadata(()))
    try:
        await asyncio.shield(sending)
    except asyncio.CancelledError:
        await asyncio.wait((sending,))
        if not sending.cancelled():
            sending.exception()  # retrieved: the cancellation is what propagates
        raise
    except grpc.aio.UsageError:
        pass  # the handler sent its own before its first message


async def refuse(context: Context, rejected: Rejected) -> NoReturn:
    """Answer ``RESOURCE_EXHAUSTED`` with the pushback gRPC's retry policy honours."""
    await context.abort(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"apf_limiter: rejected ({rejected.reason}) at priority level "
        f"{rejected.priority_level}; retry after {rejected.retry_after}s",
        trailing_metadata=rejection_metadata(rejected),
    )
    raise AssertionError("context.abort returned")  # pragma: no cover - it always raises


async def deadline_passed(context: Context, ticket: Ticket) -> NoReturn:
    """Answer a call whose request deadline passed (its seats went back already)."""
    await context.abort(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "apf_limiter: the request deadline passed",
        trailing_metadata=_names(ticket),
    )
    raise AssertionError("context.abort returned")  # pragma: no cover - it always raises


def _names(ticket: Ticket) -> tuple[tuple[str, str], ...]:
    return ((FLOW_SCHEMA_KEY, ticket.flow_schema), (PRIORITY_LEVEL_KEY, ticket.priority_level))
