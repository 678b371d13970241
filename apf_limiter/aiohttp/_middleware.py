"""The aiohttp front door: Kubernetes API Priority and Fairness as an ``aiohttp.web`` middleware.

It maps aiohttp onto the request gate (:mod:`apf_limiter.gate`), which implements the life of a
request once (admission, deadlines, the long-running cap, shadow mode). Per request: build its
digest (the identity from a hook, else anonymous; the client from ``request.remote``; verb =
lower-case method, path = ``request.path``), start it through the gate (which never waits),
wait in a queue watching for the client to leave (:mod:`apf_limiter.aiohttp._waiting`) when
it must, run the handler holding the seats, or answer 429. An ``on_response_prepare`` hook
(aiohttp's one sight of a response starting, streamed or not) adds the APF headers and tells
the gate the response started: a long-running request (``route_options(long_running=True)``,
a WebSocket) gives its seats back there, and its deadline ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from apf_limiter._digest import RequestDigest, fill_digest
from apf_limiter._errors import Rejected
from apf_limiter.aiohttp._responses import Headers, client_gone, expired, rejection
from apf_limiter.aiohttp._waiting import DISCONNECT_POLL, Watch, wait_watching_disconnect
from apf_limiter.gate import (
    MARKED_ENDPOINTS,
    ClientDeadlines,
    Gate,
    Identity,
    ResponseHeaders,
    RouteOptions,
    SlowClients,
    Ticket,
    endpoint_options,
    header_timeout,
    identity_names,
)
from apf_limiter.limiter import Limiter

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource

#: ``identify(request) -> Identity | None`` (or an awaitable of it): who sent a request.
IdentifyHook = Callable[[web.Request], "Identity | Awaitable[Identity | None] | None"]
#: ``long_running(request) -> bool | None``: whether a request is long-running (``None``: the
#: route's mark, else whether it upgrades the connection, as a WebSocket does).
LongRunningHook = Callable[[web.Request], "bool | None"]
#: ``on_reject(request, rejected) -> web.StreamResponse``: a custom rejection response.
RejectHook = Callable[[web.Request, Rejected], web.StreamResponse]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_INF: Final = float("inf")
# The request's ticket, for the on_response_prepare hook; then the response it saw start.
_KEY: Final = web.RequestKey("apf_limiter.ticket", object)
# Set when the request is long-running only as a WebSocket handshake (no hook or route said).
_PRESUMED: Final = web.RequestKey("apf_limiter.presumed_websocket", bool)


class AiohttpMiddleware:
    """An ``aiohttp.web`` middleware admitting requests through API Priority and Fairness.

    Install it with :func:`setup`, which also adds the hook that sees responses start; see
    ``docs/aiohttp.md``.

    Args:
        limiter: The limiter to admit requests through (shared, e.g. with a metrics endpoint).
        config: The configuration of a limiter the middleware creates (``None`` and no
            ``limiter``: the built-in web-app configuration). Not together with ``limiter``.
        identify: ``identify(request) -> Identity | None`` (or an awaitable of it); ``None``:
            every request is anonymous.
        long_running: ``long_running(request) -> bool | None``: whether a request gives its
            seats back once its response starts; ``None`` falls back to the handler's
            :func:`~apf_limiter.gate.route_options`, then to whether it upgrades its
            connection (WebSockets are long-running).
        on_reject: ``on_reject(request, rejected) -> web.StreamResponse``: a custom rejection
            response (``Retry-After`` and the APF headers are added unless it sets them).
        wait_limit: Seconds a request may wait in a queue, at most 60; ``None``: the
            configuration's ``requestWaitLimit``.
        headers: The response headers added (``None``: none).
        slow_clients: The request deadlines (504). Its ``min_body_rate`` does not apply:
            aiohttp gives a middleware no sight of body reads (the deadline bounds them).
        max_long_running: Caps on open long-running requests by flow-schema name (``"*"``:
            each schema not named); one more is answered 429 (``long-running-limit``).
        disconnect_poll: Seconds between two looks at the connection of a queued request,
            or of a long-running response once it started (its handler is cancelled when the
            client left), which tell when the server's ``handler_cancellation`` is off.
        client_deadlines: Queues that respect client deadlines (``None``: off, Kubernetes'
            behaviour): a request waits in its queue no longer than its client's timeout
            header, or its route's request timeout, says.

    Attributes:
        gate: The request gate this middleware maps aiohttp onto.

    Raises:
        ValueError: On contradicting or out-of-range arguments.
        ConfigError: If ``config`` is invalid.
    """

    __middleware_version__ = 1  # a new-style middleware: called as (request, handler)

    def __init__(
        self,
        *,
        limiter: Limiter | None = None,
        config: ConfigSource | None = None,
        identify: IdentifyHook | None = None,
        long_running: LongRunningHook | None = None,
        on_reject: RejectHook | None = None,
        wait_limit: float | None = None,
        headers: ResponseHeaders | None = ResponseHeaders(),  # noqa: B008 - frozen
        slow_clients: SlowClients | None = None,
        max_long_running: Mapping[str, int] | None = None,
        disconnect_poll: float = DISCONNECT_POLL,
        client_deadlines: ClientDeadlines | None = None,
    ) -> None:
        if limiter is not None and config is not None:
            raise ValueError("give the aiohttp middleware a limiter or a config, not both")
        if not disconnect_poll > 0:
            raise ValueError(f"disconnect_poll must be positive, got {disconnect_poll!r}")
        self._owns_limiter = limiter is None
        slow = slow_clients if slow_clients is not None else SlowClients()
        self.gate: Final = Gate(
            limiter if limiter is not None else Limiter(config),
            wait_limit=wait_limit,
            slow_clients=dataclasses.replace(slow, min_body_rate=None),
            max_long_running=max_long_running,
        )
        self._identify = identify
        self._long_running = long_running
        self._on_reject = on_reject
        shown = headers if headers is not None else ResponseHeaders(None, None)
        self._headers = Headers(shown, self.gate)
        self._poll = float(disconnect_poll)
        if client_deadlines is not None and not isinstance(client_deadlines, ClientDeadlines):
            raise TypeError(f"client_deadlines must be a ClientDeadlines, got {client_deadlines!r}")
        self._client_deadlines = client_deadlines

    @property
    def limiter(self) -> Limiter:
        """The limiter requests are admitted through (the gate's)."""
        return self.gate.limiter

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Admit one request through the gate and run ``handler`` holding its seats."""
        identity: Identity | None = None
        if self._identify is not None:
            identified = self._identify(request)
            if inspect.isawaitable(identified):
                identified = await identified
            identity = identified
        options: RouteOptions | None = None
        if MARKED_ENDPOINTS[0]:  # no lookup until route_options() has marked something
            options = endpoint_options(request.match_info.handler)
        digest = _digest(request, identity, options)
        long_running = self._long_running(request) if self._long_running is not None else None
        presumed = False  # long-running only as a WebSocket handshake, not accepted yet
        if long_running is None:
            long_running = options.long_running if options is not None else False
            if not long_running and _websocket_handshake(request):
                long_running = presumed = True
        timeout = options.request_timeout if options is not None else None
        deadlines = self._client_deadlines
        client: float | None = None
        if deadlines is not None:
            told = None
            if deadlines.header is not None:
                told = header_timeout(request.headers.get(deadlines.header))
            own = timeout if deadlines.request_timeout else _INF
            client = self.gate.client_wait(own, told)
        try:
            ticket = self.gate.start(digest, long_running, timeout, client)  # never waits
        except Rejected as rejected:
            return self._reject(request, rejected)
        error: BaseException | None = None
        response: web.StreamResponse | None = None
        watch: Watch | None = None
        try:
            if not ticket.admitted:
                response = await self._wait(request, ticket)
            if response is None:
                request[_KEY] = ticket
                if presumed:
                    request[_PRESUMED] = True
                if ticket.long_running:  # once it started, nothing else ends it (_waiting)
                    task = asyncio.current_task()
                    assert task is not None  # aiohttp runs each request in a task of its own
                    watch = Watch(request, task, self._poll, ticket)
                response = await handler(request)
        except BaseException as exc:
            error = exc
        finally:
            if watch is not None:
                watch.stop()
            # Every way the request ends (errors, disconnects, cancellation) ends the ticket.
            done = ticket.end(error)
        if watch is not None and watch.fired:  # its client left: our cancellation ends here
            remaining = watch.task.uncancel()
            if isinstance(error, asyncio.CancelledError) and remaining == 0:  # ours alone
                started = request.pop(_KEY, None)
                if isinstance(started, web.StreamResponse):
                    return started  # aiohttp finds its connection closed: no more is written
                return client_gone(ticket, self._headers)
        if done:  # expired; the cancellation it caused ends here (the seats went back)
            if ticket.started:
                # Expired after the response started: it ends unfinished, as aiohttp ends a
                # response whose connection is closed.
                transport = request.transport
                if transport is not None:
                    transport.close()
                started = request.pop(_KEY, None)  # the response the hook saw start
                if isinstance(started, web.StreamResponse):
                    return started  # aiohttp finds its connection closed: no more is written
                # Prepared on a clone of the request (``request.clone()``), whose state the
                # hook updated, not this one's: a stand-in, which the closed connection drops.
                return expired(ticket, self._headers)
            request.pop(_KEY, None)  # our own answer: its headers are set here
            return expired(ticket, self._headers)
        if error is not None:
            raise error
        assert response is not None
        return response

    async def _wait(self, request: web.Request, ticket: Ticket) -> web.StreamResponse | None:
        """Wait in a queue: ``None`` once admitted, else the answer (429 or 499)."""
        try:
            if await wait_watching_disconnect(request, ticket, self._poll):
                return None
        except Rejected as rejected:  # the wait limit passed
            ticket.disarm()  # answered here, not by the deadline
            return self._reject(request, rejected)
        return client_gone(ticket, self._headers)

    def _reject(self, request: web.Request, rejected: Rejected) -> web.StreamResponse:
        if self._on_reject is None:
            return rejection(rejected, self._headers)
        response = self._on_reject(request, rejected)
        response.headers.setdefault("Retry-After", str(rejected.retry_after))
        self._headers.refused(response, rejected)
        return response

    async def response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """The ``on_response_prepare`` hook: the response starts (headers, seats)."""
        ticket = request.get(_KEY)
        if not isinstance(ticket, Ticket):
            return  # prepared before: a handler may prepare more than one response
        request[_KEY] = response  # kept for the middleware, should the deadline abort it
        self._headers.admitted(response, ticket)
        websocket = isinstance(response, web.WebSocketResponse)
        if not websocket and request.get(_PRESUMED, False):
            # The client's handshake headers alone made it long-running, and the handler
            # answered with an ordinary response: that keeps its seats and its deadline, or
            # any client could free a stream of both by sending ``Upgrade: websocket``.
            ticket.long_running = False
        # A WebSocket's stream never ends by itself: its deadline ends as it is accepted.
        ticket.response_started(stream=websocket)

    async def close(self, app: web.Application) -> None:
        """The ``on_cleanup`` hook: close a limiter the middleware created."""
        if self._owns_limiter:
            self.gate.limiter.close()

    def __repr__(self) -> str:
        return f"<AiohttpMiddleware {self.gate.limiter!r}>"


def setup(app: web.Application, **options: Any) -> AiohttpMiddleware:
    """Guard an aiohttp application with API Priority and Fairness.

    Appends the middleware to ``app.middlewares`` (the last one, nearest the handlers: add
    authentication middlewares before calling it), adds its ``on_response_prepare`` hook (the
    APF headers, long-running requests) and, if it creates its limiter, closes that limiter
    on cleanup::

        app = web.Application()
        setup(app, config="apf.yaml")

    Args:
        app: The application, not started yet.
        **options: The :class:`AiohttpMiddleware` arguments.

    Returns:
        The middleware (its ``limiter`` serves statistics and metrics).
    """
    middleware = AiohttpMiddleware(**options)
    app.middlewares.append(middleware)
    app.on_response_prepare.append(middleware.response_prepare)
    app.on_cleanup.append(middleware.close)
    return middleware


def _websocket_handshake(request: web.Request) -> bool:
    """Whether ``request`` opens a WebSocket, as ``web.WebSocketResponse`` checks it.

    Only ``Upgrade: websocket`` on a GET: another upgrade (``h2c``, which ``curl --http2``
    asks for) gets an ordinary response from aiohttp, and must not count as long-running.
    """
    upgrade = request.headers.get("Upgrade")
    return (
        upgrade is not None and request.method == "GET" and upgrade.strip().lower() == "websocket"
    )


def _digest(
    request: web.Request, identity: Identity | None, options: RouteOptions | None
) -> RequestDigest:
    user, groups = identity_names(identity)
    estimate = options.estimate if options is not None else None
    seats, final_seats, latency = (
        (None, 0, 0.0)
        if estimate is None
        else (estimate.seats, estimate.final_seats, estimate.additional_latency)
    )
    # fill_digest: the checked constructor copies every header to lower-case its names;
    # aiohttp's headers are looked up case-insensitively already (ByHeader).
    return fill_digest(
        RequestDigest, user, groups, request.method.lower(), request.path, "", "", "", "", "",
        request.remote or "", request.headers, seats, final_seats, latency,
    )  # fmt: skip
