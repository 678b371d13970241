"""APFMiddleware: Kubernetes API Priority and Fairness in front of any ASGI application.

This module maps ASGI onto the request gate (:mod:`apf_limiter.gate`), which implements the
life of a request once (admission, deadlines, the body rate, the long-running cap, shadow
mode). Per request (``http`` and ``websocket`` scopes): classify it from its scope
(:mod:`apf_limiter.asgi._classify`), start it through the gate (which never waits: a request
that finds free seats costs no event-loop round trip and never touches ``receive``), and run
the application holding the seats, or answer 429. Only a request that has to queue gets a
helper task watching for its client to disconnect (:mod:`apf_limiter.asgi._waiting`). The
gate's ticket is told as the response starts (long-running requests, WebSockets: seats back,
deadline over) and as it completes; its response metadata become headers. Wiring mistakes seen
in requests are warned about once each (:mod:`apf_limiter.asgi._mistakes`). ``lifespan``
passes through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from apf_limiter._errors import Rejected
from apf_limiter._warn_once import WarnOnce
from apf_limiter.asgi._body_rate import timed_receive
from apf_limiter.asgi._classify import ScopeClassifier
from apf_limiter.asgi._debug import is_debug_path, load_debug_app
from apf_limiter.asgi._identity import default_identify, route_path
from apf_limiter.asgi._lifespan import closing_at_shutdown
from apf_limiter.asgi._mistakes import seats_clamped, warn_clamped
from apf_limiter.asgi._responses import (
    DROPPED,
    STARTS,
    HeaderNames,
    queue_wait_pair,
    rate_limit_pairs,
    send_client_gone,
    send_expired,
    send_rejection,
)
from apf_limiter.asgi._routes import RouteLookup
from apf_limiter.asgi._settings import BodyBuffer, DebugEndpoints, IdentityHooks, fold_legacy
from apf_limiter.asgi._shadow import shadow_pair, shadow_send
from apf_limiter.asgi._types import ASGIApp, Message, Receive, RejectHook, Scope, Send
from apf_limiter.asgi._waiting import (
    BodyBudget,
    ReplayReceive,
    headers_say_body,
    wait_watching_disconnect,
)
from apf_limiter.gate import (
    BODY,
    NO_HEADERS,
    ClientDeadlines,
    Gate,
    ResponseHeaders,
    RouteOptions,
    SlowClients,
    Ticket,
    header_name,
    header_timeout,
)
from apf_limiter.limiter import Limiter

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource

_INF: Final = float("inf")


class APFMiddleware:
    """Pure-ASGI middleware that admits requests through Kubernetes API Priority and Fairness.

    Use it with ``app.add_middleware(APFMiddleware, config=...)`` (Starlette, FastAPI) or wrap
    any ASGI application: ``APFMiddleware(app, limiter=limiter)``. See ``docs/asgi.md``.

    Args:
        app: The ASGI application to guard.
        limiter: The limiter to admit requests through (shared, e.g. with a metrics endpoint).
        config: The configuration of a limiter the middleware creates (``None`` and no
            ``limiter``: the built-in web-app configuration). Not together with ``limiter``.
        identity: The ``identify``, ``resolve``, ``estimate`` and ``long_running`` hooks.
        paths: Route settings by ``nonResourceURLs`` pattern, for applications whose
            endpoints cannot be marked with :func:`~apf_limiter.asgi.route_options`.
        on_reject: ``on_reject(scope, rejected) -> ASGI app``: builds a custom rejection
            response (e.g. a Starlette ``Response``); ``Retry-After`` and the APF headers are
            added unless it sets them.
        wait_limit: Seconds a request may wait in a queue, at most 60 (Kubernetes' cap);
            ``None``: the configuration's ``requestWaitLimit``.
        headers: The response headers added (``None``: none).
        slow_clients: Request deadlines and the minimum body rate (60 s, 240 bytes/s after
            5 s by default).
        max_long_running: Caps on open long-running requests by flow-schema name (``"*"``: each
            schema not named); one more is answered 429 (``long-running-limit``). ``None``: none.
        body: Request body kept while requests wait in a queue.
        debug: Serve the debug endpoints (``None``: not served).
        client_deadlines: Queues that respect client deadlines (``None``: off, Kubernetes'
            behaviour): a request waits in its queue no longer than its client's timeout
            header, or its route's request timeout, says.
        **legacy: The keyword arguments of earlier releases (``identify=``,
            ``flow_schema_header=``, ``request_timeout=``, ...), folded into the values above.

    Attributes:
        gate: The request gate this middleware maps ASGI onto.

    Raises:
        ValueError: On contradicting or out-of-range arguments.
        TypeError: On an unknown keyword argument.
        ConfigError: If ``config`` is invalid.
        ImportError: If ``debug`` is given but the debug endpoints are not installed.
    """

    def __init__(
        self,
        app: ASGIApp,
        /,
        *,
        limiter: Limiter | None = None,
        config: ConfigSource | None = None,
        identity: IdentityHooks | None = None,
        paths: Mapping[str, RouteOptions] | None = None,
        on_reject: RejectHook | None = None,
        wait_limit: float | None = None,
        headers: ResponseHeaders | None = ResponseHeaders(),  # noqa: B008 - frozen
        slow_clients: SlowClients | None = None,
        max_long_running: Mapping[str, int] | None = None,
        body: BodyBuffer | None = None,
        debug: DebugEndpoints | None = None,
        client_deadlines: ClientDeadlines | None = None,
        **legacy: Any,
    ) -> None:
        if limiter is not None and config is not None:
            raise ValueError("give APFMiddleware a limiter or a config, not both")
        if legacy:
            groups: dict[str, Any] = {
                "identity": identity,
                "headers": headers,
                "slow_clients": slow_clients,
                "body": body,
                "debug": debug,
            }
            fold_legacy(groups, legacy)
            identity, headers = groups["identity"], groups["headers"]
            slow_clients, body, debug = groups["slow_clients"], groups["body"], groups["debug"]
        hooks = identity if identity is not None else IdentityHooks()
        shown = headers if headers is not None else NO_HEADERS
        buffer = body if body is not None else BodyBuffer()
        self.app = app
        self._owns_limiter = limiter is None
        self._limiter = limiter if limiter is not None else Limiter(config)
        # Deadlines kept even with every timeout off: a marked route may still set one.
        self.gate: Final = Gate(
            self._limiter,
            wait_limit=wait_limit,
            slow_clients=slow_clients if slow_clients is not None else SlowClients(),
            max_long_running=max_long_running,
        )
        self._start = self.gate.start  # bound once: every request calls it
        if client_deadlines is not None and not isinstance(client_deadlines, ClientDeadlines):
            raise TypeError(f"client_deadlines must be a ClientDeadlines, got {client_deadlines!r}")
        self._client_deadlines = client_deadlines
        self._deadline_header = (
            None
            if client_deadlines is None or client_deadlines.header is None
            else client_deadlines.header.lower().encode("ascii")
        )
        # Wiring mistakes seen in requests, each warned about once (apf_limiter.asgi._mistakes).
        self._warn = WarnOnce()
        identify = hooks.identify
        self._classify = ScopeClassifier(
            identify if identify is not None else default_identify,
            hooks.resolve,
            hooks.estimate,
            hooks.long_running,
            RouteLookup(paths, app),
            self._warn if identify is None else None,  # watch the default identity only
        ).classify
        self._on_reject = on_reject
        self._headers = HeaderNames(shown.flow_schema, shown.priority_level)
        self._headers_enabled = self._headers.enabled
        self._shadow_header = header_name(shown.shadow)
        self._queue_wait_header = header_name(shown.queue_wait)
        self._rate_limit = shown.rate_limit is True
        self._max_body_buffer = buffer.max
        self._body_budget = BodyBudget(buffer.total)
        self._times_bodies = self.gate.times_bodies
        self._debug_app: ASGIApp | None = None
        if debug is not None:
            self._debug_app = load_debug_app(self._limiter, debug.authorize, debug.options())

    @property
    def limiter(self) -> Limiter:
        """The limiter requests are admitted through."""
        return self._limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: admit ``http``/``websocket`` scopes, pass others on."""
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            if kind == "lifespan":
                # Arms the limiter's timer in the server's loop: a server that gets no request
                # still applies a changed configuration file.
                self._limiter.run_due()
            if kind == "lifespan" and self._owns_limiter:
                await self.app(scope, receive, closing_at_shutdown(send, self._limiter))
            else:
                await self.app(scope, receive, send)
            return
        if self._debug_app is not None and is_debug_path(route_path(scope)):
            await self._debug_app(scope, receive, send)
            return
        # Everything inline, in this one coroutine: every request takes this path, and an
        # extra coroutine per request shows in benchmarks/http_instructions.py.
        classified = self._classify(scope)
        if not isinstance(classified, tuple):
            classified = await classified  # a hook returned an awaitable
        digest, long_running, timeout, source = classified
        try:
            if self._client_deadlines is None:  # the option's whole cost when off
                ticket = self._start(digest, long_running, timeout)  # never waits
            else:
                ticket = self._start(
                    digest, long_running, timeout, self._client_deadline(scope, timeout)
                )
        except Rejected as rejected:
            await self._reject(scope, receive, send, rejected)
            return
        if digest.seats is not None and seats_clamped(digest, ticket.admission):
            warn_clamped(self._warn, scope, source, digest, ticket.admission)
        if ticket.tracked and self._times_bodies and kind == "http":
            receive = partial(timed_receive, ticket, scope, receive)  # timed if it has a body
        replay: ReplayReceive | None = None  # set only for a request that waited
        error: BaseException | None = None
        try:
            app_receive: Receive | None = receive
            if not ticket.admitted:
                app_receive = await self._wait(scope, receive, send, ticket)
                if type(app_receive) is ReplayReceive:
                    replay = app_receive
            if app_receive is not None:
                state = scope.get("state")
                if state is None:
                    state = scope["state"] = {}
                admission = state["apf"] = ticket.admission
                # The send of the application, built here rather than by a method: one call
                # less per request.
                extra = None
                if self._headers_enabled:
                    key = (ticket.flow_schema, ticket.priority_level)
                    extra = self._headers.cache.get(key) or self._headers.headers(*key)
                if self._queue_wait_header is not None:  # after the wait: it is final
                    extra = [*(extra or ()), queue_wait_pair(self._queue_wait_header, ticket)]
                rate_limit = self._rate_limit
                server_send = send
                if self._shadow_header is not None and admission.shadow is not None:
                    # Below ours, so that the outcome is read as the response starts.
                    server_send = shadow_send(
                        send, ticket, self._shadow_header, self._limiter.clock
                    )

                # A plain function handing back the server's awaitable, not a coroutine: no
                # extra frame per message. So the seats go back as the application hands the
                # server its last body message (or, long-running, its response start), just
                # before the server writes it; an error in that write changes nothing.
                def send_and_release(message: Message) -> Awaitable[None]:
                    kind = message["type"]
                    if ticket.reason is not None:
                        return DROPPED  # expired: being cancelled, nothing more goes out
                    if kind == "http.response.body":  # the common message first
                        if not message.get("more_body", False):
                            admission.release()
                            ticket.released = True  # Ticket.end need not release again
                        return server_send(message)
                    if kind in STARTS:
                        added = extra
                        if rate_limit:  # read before a long-running request's seats go back
                            added = [*(extra or ()), *self._rate_limit_pairs(ticket)]
                        # Tracked until the response starts even if long-running.
                        # Ticket.response_started, its common case inline (a call costs
                        # more than the rest): an ordinary response of a tracked request.
                        if ticket.long_running or kind == "websocket.accept":
                            ticket.response_started(kind == "websocket.accept")
                        elif ticket.tracked:
                            ticket.started = True  # expiring now aborts the response
                        if added:
                            headers = [*message.get("headers", ()), *added]
                            return server_send({**message, "headers": headers})
                        return server_send(message)
                    if (
                        kind == "http.response.zerocopysend" and not message.get("more_body", False)
                    ) or kind == "http.response.pathsend":
                        admission.release()
                        ticket.released = True
                    return server_send(message)

                await self.app(scope, app_receive, send_and_release)
        except BaseException as exc:
            error = exc
        finally:
            # Every way the call ends (errors, disconnects, cancellation) ends the ticket.
            if replay is not None:
                replay.close()  # kept messages not replayed, a receive() never awaited
            expired = ticket.end(error)
        if error is not None and not expired:
            raise error
        # Expired: the cancellation it caused ends here (the seats went back already).
        if expired and not ticket.started:
            await self._send_expired(scope, send, ticket)
        # Expired after the response started: it ends unfinished, the server closes the
        # connection (there is no other way to abort a response in ASGI).

    def _client_deadline(self, scope: Scope, timeout: float | None) -> float | None:
        """Seconds the client still waits: its timeout header, its route's timeout."""
        options = self._client_deadlines
        assert options is not None
        header = self._deadline_header
        told: float | None = None
        if header is not None:
            for name, value in scope.get("headers") or ():
                if name == header:
                    told = header_timeout(value)
                    break  # the first only: bounded work whatever the client sends
        own = timeout if options.request_timeout else _INF
        return self.gate.client_wait(own, told)

    async def _send_expired(self, scope: Scope, send: Send, ticket: Ticket) -> None:
        headers = self._headers.headers(ticket.flow_schema, ticket.priority_level)
        shadow = shadow_pair(self._shadow_header, ticket)
        if shadow is not None:
            headers = [*headers, shadow]
        await send_expired(scope, send, 408 if ticket.reason == BODY else 504, headers)

    async def _wait(
        self, scope: Scope, receive: Receive, send: Send, ticket: Ticket
    ) -> Receive | None:
        """Wait in a queue, watching for a disconnect: the app's ``receive``, or ``None``."""
        watch = self._max_body_buffer
        if watch and scope["type"] == "http":
            # An "Expect: 100-continue" client uploads its body only once the server reads
            # it (servers send "100 Continue" at the first receive()): reading to watch for
            # a disconnect would have it upload a body that may be refused after the wait.
            # Kubernetes, too, reads no body before admission. Without a body, reading
            # costs the client nothing and notices a departure.
            body, expects_continue = headers_say_body(scope)
            if body and expects_continue:
                watch = 0
        try:
            waited = await wait_watching_disconnect(ticket, receive, watch, self._body_budget)
        except BaseException:
            # Cancelled (a deadline, an outer timeout, the server) while waiting, or in the
            # instant after the seats came, as the watcher winds down: leave the queue, or
            # give the seats back, unrun (whichever applies, once).
            ticket.admission.release(ran=False)
            raise
        if waited.rejected is None and not waited.disconnected:
            return waited.receive
        ticket.disarm()  # answered here, not by the deadline
        try:
            if waited.rejected is not None:
                await self._reject(scope, waited.receive, send, waited.rejected)
            else:
                # Out of its queue already, or dispatched in the same instant the client
                # left: the app never ran, so no additional latency is held either.
                ticket.abandon()
                headers = self._headers.headers(ticket.flow_schema, ticket.priority_level)
                await send_client_gone(scope, send, headers)
        finally:
            if type(waited.receive) is ReplayReceive:
                waited.receive.close()
        return None

    async def _reject(self, scope: Scope, receive: Receive, send: Send, rejected: Rejected) -> None:
        headers = self._headers.headers(rejected.flow_schema, rejected.priority_level)
        if self._rate_limit:
            fields = self.gate.rate_limit(
                rejected.priority_level,
                rejected.flow_schema,
                rejected.distinguisher,
                rejected.retry_after,
            )
            if fields is not None:
                headers = [*headers, *rate_limit_pairs(fields)]
        await send_rejection(scope, receive, send, rejected, headers, self._on_reject)

    def _rate_limit_pairs(self, ticket: Ticket) -> list[tuple[bytes, bytes]]:
        """The RateLimit fields of an admitted request, as it is now."""
        fields = self.gate.rate_limit(
            ticket.priority_level, ticket.flow_schema, ticket.admission.distinguisher
        )
        return [] if fields is None else rate_limit_pairs(fields)

    def __repr__(self) -> str:
        return f"<APFMiddleware {self._limiter!r} app={self.app!r}>"
