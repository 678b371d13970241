"""APFMiddleware: Kubernetes API Priority and Fairness in front of any ASGI application.

Per request (``http`` and ``websocket`` scopes): build a digest (identity, path or resource,
work estimate), admit it through the :class:`~apf_limiter.Limiter`, then run the application
holding the seats, or answer 429. The admission is started with ``Admission.start()``, which
never waits, so a request that finds free seats costs no event-loop round trip and never touches
``receive``; only a request that has to queue gets a helper task watching for its client to
disconnect (:mod:`apf_limiter.asgi._waiting`). Ordinary requests hold their seats until the
response body is complete; long-running ones (WebSockets, marked routes) give them back once the
response has started or the socket is accepted, and only until then have a deadline and a
minimum body rate, which bind every other request (:mod:`apf_limiter.asgi._deadline`). At a
priority level in shadow mode admission never holds nor rejects: the request runs at once, and
``shadow_header=`` tells its would-be outcome (:mod:`apf_limiter.asgi._shadow`). Wiring mistakes
seen in requests are warned about once each (:mod:`apf_limiter.asgi._mistakes`).
``max_long_running=`` caps the open long-running requests of each flow schema
(:mod:`apf_limiter.asgi._long_running`); ``queue_wait_header=`` tells admitted requests' queue
wait. ``lifespan`` passes through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from apf_limiter._errors import Rejected
from apf_limiter._warn_once import WarnOnce
from apf_limiter.asgi._classify import Classifier
from apf_limiter.asgi._deadline import Deadlines
from apf_limiter.asgi._debug import is_debug_path, load_debug_app
from apf_limiter.asgi._expiry import BODY, Expiry
from apf_limiter.asgi._identity import default_identify, route_path
from apf_limiter.asgi._long_running import LongRunningCaps
from apf_limiter.asgi._mistakes import seats_clamped, warn_clamped
from apf_limiter.asgi._options import RouteOptions, check_bytes, check_timeout, deadline_seconds
from apf_limiter.asgi._responses import (
    DROPPED,
    HeaderNames,
    closing_at_shutdown,
    header_name,
    queue_wait_pair,
    send_client_gone,
    send_expired,
    send_rejection,
    with_headers,
)
from apf_limiter.asgi._routes import RouteLookup
from apf_limiter.asgi._shadow import STARTS, shadow_pair, shadow_send
from apf_limiter.asgi._types import (
    ASGIApp,
    AuthorizeHook,
    EstimateHook,
    IdentifyHook,
    LongRunningHook,
    Message,
    Receive,
    RejectHook,
    ResolveHook,
    Scope,
    Send,
)
from apf_limiter.asgi._waiting import (
    BodyBudget,
    ReplayReceive,
    headers_say_body,
    wait_watching_disconnect,
)
from apf_limiter.limiter import Admission, Limiter, check_wait_limit

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource


class APFMiddleware:
    """Pure-ASGI middleware that admits requests through Kubernetes API Priority and Fairness.

    Use it with ``app.add_middleware(APFMiddleware, config=...)`` (Starlette, FastAPI) or wrap
    any ASGI application: ``APFMiddleware(app, limiter=limiter)``. See ``docs/asgi.md``.

    Args:
        app: The ASGI application to guard.
        limiter: The limiter to admit requests through (shared, e.g. with a metrics endpoint).
        config: The configuration of a limiter the middleware creates (``None`` and no
            ``limiter``: the built-in web-app configuration). Not together with ``limiter``.
        identify: ``identify(scope) -> Identity | None``: who sent the request. Defaults to
            the user of Starlette's ``AuthenticationMiddleware`` (``scope["user"]`` and the
            scopes of ``scope["auth"]`` as groups); ``None`` means anonymous.
        resolve: ``resolve(scope) -> ResourceAttributes | None``: turns a request into a
            resource request (e.g. a tenant from the path as namespace).
        estimate: ``estimate(scope) -> WorkEstimate | int | None``: seats of a request;
            ``None`` falls back to the route settings, then 1 seat.
        long_running: ``long_running(scope) -> bool | None``: whether a request gives its
            seats back once its response has started; ``None`` falls back to the route
            settings (WebSockets always are, unless the hook says ``False``).
        paths: Route settings by ``nonResourceURLs`` pattern, for applications whose
            endpoints cannot be marked with :func:`~apf_limiter.asgi.route_options`.
        on_reject: ``on_reject(scope, rejected) -> ASGI app``: builds a custom rejection
            response (e.g. a Starlette ``Response``); ``Retry-After`` and the APF headers are
            added unless it sets them.
        wait_limit: Seconds a request may wait in a queue, at most 60 (Kubernetes' cap);
            ``None``: the configuration's ``requestWaitLimit``.
        flow_schema_header: Response header naming the flow schema; ``None`` for none.
        priority_level_header: Response header naming the priority level; ``None`` for none.
        response_headers: ``False`` turns both APF response headers off.
        shadow_header: Response header telling, for a request at a priority level in shadow
            mode, what enforcing would have done (e.g. ``"X-APF-Shadow"``): ``wait=0.125``,
            ``rejected=queue-full; retry-after=3``, or ``pending``; ``None`` (the default)
            for none.
        queue_wait_header: Response header telling an admitted request's seconds in a queue
            (e.g. ``"X-APF-Queue-Wait"``: ``0.012``, ``0`` if admitted at once); ``None``: none.
        max_long_running: Caps on open long-running requests by flow-schema name (``"*"``: each
            schema not named); one more is answered 429 (``long-running-limit``). ``None``: none.
        max_body_buffer: Bytes of request body kept while a request waits in a queue (to be
            replayed to the application), each message counting 256 bytes more: the watcher
            reads only below this, so it keeps at most this plus one message; then
            disconnects are no longer watched. 0 watches nothing.
        max_total_body_buffer: Bytes kept by all queued requests together: while they reach
            it, no queued request reads (nor watches for a disconnect).
        request_timeout: Seconds from arrival (queue wait included) after which a request
            is cancelled, its seats returned, and answered 504 (or its response aborted if it
            started); a long-running one (a WebSocket) only until it starts (is accepted).
            ``None``: none. Kubernetes' ``--request-timeout`` is 60 s; a route's comes first.
        request_timeout_by_level: Deadlines by priority-level name (``None``: none), before
            ``request_timeout``.
        min_body_rate: Bytes per second a request body must keep up with, after
            ``body_rate_grace`` seconds of waiting for it; slower, the request is answered
            408 (as with the deadline). ``None``: no minimum.
        body_rate_grace: The grace period of ``min_body_rate``, in seconds.
        debug_endpoints: Serve the debug endpoints under ``/debug/api_priority_and_fairness/``
            (bypassing admission), guarded by ``authorize``; a mapping also turns them on, with
            ``debug_app``'s options (``{"top_flows": 5, "hash_distinguishers": True}``).
        authorize: ``authorize(scope)``: whether a debug request may be served.

    Raises:
        ValueError: On contradicting or out-of-range arguments (debug options included).
        ConfigError: If ``config`` is invalid.
        ImportError: If ``debug_endpoints=True`` but the debug endpoints are not installed.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: Limiter | None = None,
        config: ConfigSource | None = None,
        identify: IdentifyHook | None = None,
        resolve: ResolveHook | None = None,
        estimate: EstimateHook | None = None,
        long_running: LongRunningHook | None = None,
        paths: Mapping[str, RouteOptions] | None = None,
        on_reject: RejectHook | None = None,
        wait_limit: float | None = None,
        flow_schema_header: str | None = "X-APF-Flow-Schema",
        priority_level_header: str | None = "X-APF-Priority-Level",
        response_headers: bool = True,
        shadow_header: str | None = None,
        queue_wait_header: str | None = None,
        max_long_running: Mapping[str, int] | None = None,
        max_body_buffer: int = 65536,
        max_total_body_buffer: int = 16 * 1024 * 1024,
        request_timeout: float | None = 60.0,
        request_timeout_by_level: Mapping[str, float | None] | None = None,
        min_body_rate: float | None = 240.0,
        body_rate_grace: float = 5.0,
        debug_endpoints: bool | Mapping[str, Any] = False,
        authorize: AuthorizeHook | None = None,
    ) -> None:
        if limiter is not None and config is not None:
            raise ValueError("give APFMiddleware a limiter or a config, not both")
        if wait_limit is not None:
            check_wait_limit(wait_limit)
        check_bytes("max_body_buffer", max_body_buffer)
        check_bytes("max_total_body_buffer", max_total_body_buffer)
        levels = {
            name: deadline_seconds("request_timeout_by_level", timeout)
            for name, timeout in (request_timeout_by_level or {}).items()
        }
        if min_body_rate is not None:
            check_timeout("min_body_rate", min_body_rate)  # a positive number, like a time
        check_timeout("body_rate_grace", body_rate_grace)
        self.app = app
        self._owns_limiter = limiter is None
        self._limiter = limiter if limiter is not None else Limiter(config)
        # Wiring mistakes seen in requests, each warned about once (apf_limiter.asgi._mistakes).
        self._warn = WarnOnce()
        self._classify = Classifier(
            identify if identify is not None else default_identify,
            resolve,
            estimate,
            long_running,
            RouteLookup(paths, app),
            self._warn if identify is None else None,  # watch the default identity only
        ).classify
        self._on_reject = on_reject
        self._wait_limit = wait_limit
        self._headers = HeaderNames(
            flow_schema_header if response_headers else None,
            priority_level_header if response_headers else None,
        )
        self._headers_enabled = self._headers.enabled
        self._shadow_header = header_name(shadow_header)
        self._queue_wait_header = header_name(queue_wait_header)
        self._long_running_caps = (
            None if max_long_running is None else LongRunningCaps(max_long_running, self._limiter)
        )
        self._max_body_buffer = max_body_buffer
        self._body_budget = BodyBudget(max_total_body_buffer)
        self._times_bodies = min_body_rate is not None
        # Kept even with every timeout off: a marked route may still set one.
        self._deadlines = Deadlines(
            self._limiter.clock,
            deadline_seconds("request_timeout", request_timeout),
            levels,
            min_body_rate,
            body_rate_grace,
        )
        self._debug_app = load_debug_app(self._limiter, authorize, debug_endpoints)

    @property
    def limiter(self) -> Limiter:
        """The limiter requests are admitted through."""
        return self._limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: admit ``http``/``websocket`` scopes, pass others on."""
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            if kind == "lifespan" and self._owns_limiter:
                await self.app(scope, receive, closing_at_shutdown(send, self._limiter))
            else:
                await self.app(scope, receive, send)
            return
        if self._debug_app is not None and is_debug_path(route_path(scope)):
            await self._debug_app(scope, receive, send)
            return
        # Admission inline, in this one coroutine: every request takes this path, and an extra
        # coroutine per request shows in benchmarks/http_instructions.py.
        classified = self._classify(scope)
        if not isinstance(classified, tuple):
            classified = await classified  # a hook returned an awaitable
        digest, long_running, timeout, source = classified
        caps = self._long_running_caps
        counted: str | None = None  # the flow schema this open long-running request counts in
        if long_running and caps is not None:
            entered = caps.enter(digest)
            if isinstance(entered, Rejected):
                await self._reject(scope, receive, send, entered)
                return
            counted = entered
        admission = Admission(self._limiter, digest, self._wait_limit)
        try:
            admitted = admission.start()  # never waits: the fast path ends here
        except Rejected as rejected:
            if counted is not None and caps is not None:
                caps.leave(counted)
            await self._reject(scope, receive, send, rejected)
            return
        if digest.seats is not None and seats_clamped(digest, admission):
            warn_clamped(self._warn, scope, source, digest, admission)
        # Tracked until the response starts even if long-running: it holds seats until then.
        try:
            expiry = self._deadlines.track(admission, scope, receive, timeout)
        except BaseException:
            admission.release(ran=False)  # no event loop it knows, say: the seats go back
            raise
        if expiry is not None and self._times_bodies and kind == "http":
            receive = expiry.receive  # timed for the minimum rate, if there is a body
        replay: ReplayReceive | None = None  # set only for a request that waited
        try:
            app_receive: Receive | None = receive
            if not admitted:
                app_receive = await self._wait(scope, receive, send, admission, expiry)
                if type(app_receive) is ReplayReceive:
                    replay = app_receive
            if app_receive is not None:
                state = scope.get("state")
                if state is None:
                    state = scope["state"] = {}
                state["apf"] = admission
                sender = self._sender(send, admission, long_running, expiry)
                await self.app(scope, app_receive, sender)
        except BaseException as error:
            # Expired: the cancellation it caused ends here (the seats went back already).
            if expiry is None or not expiry.finish(error):
                raise
        else:
            if expiry is not None:
                expiry.finish(None)
        finally:
            admission.release()
            # Every way the call ends (errors, disconnects, cancellation) counts it out.
            if counted is not None and caps is not None:
                caps.leave(counted)
            if replay is not None:
                replay.close()  # kept messages not replayed, a receive() never awaited
        if expiry is not None and expiry.reason is not None and not expiry.started:
            headers = self._headers.headers(admission.flow_schema, admission.priority_level)
            shadow = shadow_pair(self._shadow_header, admission)
            if shadow is not None:
                headers = [*headers, shadow]
            await send_expired(scope, send, 408 if expiry.reason == BODY else 504, headers)
        # Expired after the response started: it ends unfinished, the server closes the
        # connection (there is no other way to abort a response in ASGI).

    async def _wait(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        admission: Admission,
        expiry: Expiry | None,
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
            waited = await wait_watching_disconnect(admission, receive, watch, self._body_budget)
        except BaseException:
            # Cancelled (a deadline, an outer timeout, the server) while waiting, or in the
            # instant after the seats came, as the watcher winds down: leave the queue, or
            # give the seats back, unrun (whichever applies, once).
            admission.release(ran=False)
            raise
        if waited.rejected is None and not waited.disconnected:
            return waited.receive
        if expiry is not None:
            expiry.disarm()  # answered here, not by the deadline
        try:
            if waited.rejected is not None:
                await self._reject(scope, waited.receive, send, waited.rejected)
            else:
                # Out of its queue already, or dispatched in the same instant the client
                # left: the app never ran, so no additional latency is held either.
                admission.release(ran=False)
                await self._client_gone(scope, send, admission)
        finally:
            if type(waited.receive) is ReplayReceive:
                waited.receive.close()
        return None

    async def _client_gone(self, scope: Scope, send: Send, admission: Admission) -> None:
        headers = self._headers.headers(admission.flow_schema, admission.priority_level)
        await send_client_gone(scope, send, headers)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, rejected: Rejected) -> None:
        headers = self._headers.headers(rejected.flow_schema, rejected.priority_level)
        await send_rejection(scope, receive, send, rejected, headers, self._on_reject)

    def _sender(
        self, send: Send, admission: Admission, long_running: bool, expiry: Expiry | None
    ) -> Send:
        extra = None
        if self._headers_enabled:
            extra = self._headers.headers(admission.flow_schema, admission.priority_level)
        if self._queue_wait_header is not None:  # after the wait: the queue wait is final
            extra = [*(extra or ()), queue_wait_pair(self._queue_wait_header, admission)]
        shadow_header = self._shadow_header
        if shadow_header is not None and admission.shadow is not None:
            # Below ours, so that the outcome is read as the response starts.
            send = shadow_send(send, admission, shadow_header, self._limiter.clock)

        # A plain function handing back the server's awaitable, not a coroutine: no extra
        # frame per message. So the seats go back as the application hands the server its
        # last body message (or, long-running, its response start), just before the server
        # writes it; an error in that write changes nothing, release is idempotent.
        def send_and_release(message: Message) -> Awaitable[None]:
            kind = message["type"]
            if expiry is not None and expiry.reason is not None:
                return DROPPED  # expired: being cancelled, nothing more goes out
            if kind == "http.response.body":  # the common message first
                if not message.get("more_body", False):
                    admission.release()
                return send(message)
            if kind in STARTS:
                if expiry is not None:
                    if long_running or kind == "websocket.accept":
                        expiry.disarm()  # exempt from now on: no deadline, no body rate
                    else:
                        expiry.started = True  # expiring now aborts the response
                if long_running:
                    admission.release()
                return send(with_headers(message, extra) if extra else message)
            if (
                kind == "http.response.zerocopysend" and not message.get("more_body", False)
            ) or kind == "http.response.pathsend":
                admission.release()
            return send(message)

        return send_and_release

    def __repr__(self) -> str:
        return f"<APFMiddleware {self._limiter!r} app={self.app!r}>"
