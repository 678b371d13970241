"""APFMiddleware: Kubernetes API Priority and Fairness in front of any ASGI application.

Per request (``http`` and ``websocket`` scopes): build a digest (identity, path or resource,
work estimate), admit it through the :class:`~apf_limiter.Limiter`, then run the application
holding the seats, or answer 429. The admission is started with ``Admission.start()``, which
never waits, so a request that finds free seats costs no event-loop round trip and never
touches ``receive``; only a request that has to queue gets a helper task watching for its
client to disconnect
(:mod:`apf_limiter.asgi._waiting`). Ordinary requests hold their seats until the response body
is complete; long-running ones (WebSockets, marked routes) give them back once the response has
started or the socket is accepted. ``lifespan`` passes through.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

from apf_limiter._digest import RequestDigest
from apf_limiter._errors import Rejected
from apf_limiter.asgi._identity import build_digest, default_identify, route_path
from apf_limiter.asgi._options import Identity, ResourceAttributes, RouteOptions, WorkEstimate
from apf_limiter.asgi._responses import HeaderNames, send_client_gone, send_rejection, with_headers
from apf_limiter.asgi._routes import RouteLookup
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
from apf_limiter.asgi._waiting import ReplayReceive, wait_watching_disconnect
from apf_limiter.limiter import Admission, Limiter, check_wait_limit

if TYPE_CHECKING:
    from apf_limiter.config._sources import ConfigSource

#: Requests below this path go to the debug endpoints when ``debug_endpoints=True``.
DEBUG_PATH: Final = "/debug/api_priority_and_fairness"

_STARTS: Final = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start"}
)
_BODIES: Final = frozenset({"http.response.body", "http.response.zerocopysend"})
_LIFESPAN_ENDS: Final = frozenset({"lifespan.shutdown.complete", "lifespan.shutdown.failed"})


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
        max_body_buffer: Bytes of request body kept while a request waits in a queue (to be
            replayed to the application), each message counting 256 bytes more; past this,
            disconnects are no longer watched. 0 watches nothing.
        debug_endpoints: Serve the debug endpoints under ``/debug/api_priority_and_fairness/``
            (bypassing admission), guarded by ``authorize``.
        authorize: ``authorize(scope)``: whether a debug request may be served.

    Raises:
        ValueError: On contradicting or out-of-range arguments.
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
        max_body_buffer: int = 65536,
        debug_endpoints: bool = False,
        authorize: AuthorizeHook | None = None,
    ) -> None:
        if limiter is not None and config is not None:
            raise ValueError("give APFMiddleware a limiter or a config, not both")
        if wait_limit is not None:
            check_wait_limit(wait_limit)
        if isinstance(max_body_buffer, bool) or not isinstance(max_body_buffer, int):
            raise ValueError(f"max_body_buffer must be an integer, got {max_body_buffer!r}")
        if max_body_buffer < 0:
            raise ValueError(f"max_body_buffer must not be negative, got {max_body_buffer!r}")
        self.app = app
        self._owns_limiter = limiter is None
        self._limiter = limiter if limiter is not None else Limiter(config)
        self._identify: IdentifyHook = identify if identify is not None else default_identify
        self._resolve = resolve
        self._estimate = estimate
        self._long_running = long_running
        self._more_hooks = resolve is not None or estimate is not None or long_running is not None
        self._routes = RouteLookup(paths, app)
        self._on_reject = on_reject
        self._wait_limit = wait_limit
        self._headers = HeaderNames(
            flow_schema_header if response_headers else None,
            priority_level_header if response_headers else None,
        )
        self._headers_enabled = self._headers.enabled
        self._max_body_buffer = max_body_buffer
        self._debug_app: ASGIApp | None = None
        if debug_endpoints:
            self._debug_app = _load_debug_app(self._limiter, authorize)

    @property
    def limiter(self) -> Limiter:
        """The limiter requests are admitted through."""
        return self._limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: admit ``http``/``websocket`` scopes, pass others on."""
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            if kind == "lifespan" and self._owns_limiter:
                await self.app(scope, receive, self._lifespan_send(send))
            else:
                await self.app(scope, receive, send)
            return
        if self._debug_app is not None and _is_debug_path(route_path(scope)):
            await self._debug_app(scope, receive, send)
            return
        # Admission inline, in this one coroutine: every request takes this path, and an extra
        # coroutine per request shows in benchmarks/http_instructions.py.
        classified = self._classify(scope)
        if not isinstance(classified, tuple):
            classified = await classified  # a hook returned an awaitable
        digest, long_running = classified
        admission = Admission(self._limiter, digest, self._wait_limit)
        try:
            admitted = admission.start()  # never waits: the fast path ends here
        except Rejected as rejected:
            await self._reject(scope, receive, send, rejected)
            return
        replay: ReplayReceive | None = None  # set only for a request that waited
        if not admitted:
            # An "Expect: 100-continue" client uploads its body only once the server reads
            # it (servers send "100 Continue" at the first receive()): reading to watch for
            # a disconnect would have it upload a body that may be refused after the wait.
            # Kubernetes, too, reads no body before admission.
            watch = 0 if _expects_continue(scope) else self._max_body_buffer
            try:
                waited = await wait_watching_disconnect(admission, receive, watch)
            except BaseException:
                # Cancelled (an outer timeout, the server) while waiting, or in the instant
                # after the seats came, as the watcher winds down: leave the queue, or give
                # the seats back, unrun (whichever applies, once).
                admission.release(ran=False)
                raise
            if waited.rejected is not None:
                await self._reject(scope, waited.receive, send, waited.rejected)
                return
            if waited.disconnected:
                # Out of its queue already, or dispatched in the same instant the client left:
                # the app never ran, so no additional latency is held either.
                admission.release(ran=False)
                await self._client_gone(scope, send, admission)
                return
            receive = waited.receive
            if type(receive) is ReplayReceive:
                replay = receive
        try:
            state = scope.get("state")
            if state is None:
                state = scope["state"] = {}
            state["apf"] = admission
            await self.app(scope, receive, self._sender(send, admission, long_running))
        finally:
            admission.release()
            if replay is not None:
                replay.close()  # a receive() handed over from the wait, never awaited

    def _classify(
        self, scope: Scope
    ) -> tuple[RequestDigest, bool] | Coroutine[Any, Any, tuple[RequestDigest, bool]]:
        """The digest and long-running flag, or a coroutine for them once a hook must be awaited.

        Synchronous while every hook answers synchronously (the default identity and no other
        hooks, the common case): a coroutine per request would cost more than the rest of it.
        """
        # Typed as object: the checks below give the useful error for a wrong return type.
        identity: Any = self._identify(scope)
        # Test the common (synchronous) outcomes first: isawaitable() is comparatively slow.
        if identity is not None and type(identity) is not Identity:
            if inspect.isawaitable(identity):
                return self._classify_awaiting(scope, identity)
            _check_identity(identity)
        if self._more_hooks:
            return self._classify_awaiting(scope, identity)
        return self._classified(scope, identity, None, None, None)

    async def _classify_awaiting(self, scope: Scope, identity: Any) -> tuple[RequestDigest, bool]:
        """:meth:`_classify` past the default: hooks that may return awaitables."""
        if inspect.isawaitable(identity):
            identity = await identity
            _check_identity(identity)
        resource: ResourceAttributes | None = None
        if self._resolve is not None:
            resolved: Any = self._resolve(scope)
            if inspect.isawaitable(resolved):
                resolved = await resolved
            if resolved is not None and not isinstance(resolved, ResourceAttributes):
                raise TypeError(
                    f"resolve() must return ResourceAttributes or None, got {resolved!r}"
                )
            resource = resolved
        estimate: WorkEstimate | None = None
        if self._estimate is not None:
            estimated: Any = self._estimate(scope)
            if inspect.isawaitable(estimated):
                estimated = await estimated
            if isinstance(estimated, int) and not isinstance(estimated, bool):
                estimated = WorkEstimate(estimated)
            elif estimated is not None and not isinstance(estimated, WorkEstimate):
                raise TypeError(
                    f"estimate() must return a WorkEstimate, an int or None, got {estimated!r}"
                )
            estimate = estimated
        long_running: bool | None = None
        if self._long_running is not None:
            marked: Any = self._long_running(scope)
            if inspect.isawaitable(marked):
                marked = await marked
            if marked is not None and not isinstance(marked, bool):
                raise TypeError(f"long_running() must return a bool or None, got {marked!r}")
            long_running = marked
        return self._classified(scope, identity, resource, estimate, long_running)

    def _classified(
        self,
        scope: Scope,
        identity: Identity | None,
        resource: ResourceAttributes | None,
        estimate: WorkEstimate | None,
        long_running: bool | None,
    ) -> tuple[RequestDigest, bool]:
        """Fill in what the hooks left open from the route settings, then build the digest."""
        if estimate is None or long_running is None:
            options = self._routes.lookup(scope)
            if options is not None:
                if estimate is None:
                    estimate = options.estimate
                if long_running is None and options.long_running:
                    long_running = True
        if long_running is None:
            long_running = scope["type"] == "websocket"
        return build_digest(scope, identity, resource, estimate), long_running

    async def _client_gone(self, scope: Scope, send: Send, admission: Admission) -> None:
        headers = self._headers.headers(admission.flow_schema, admission.priority_level)
        await send_client_gone(scope, send, headers)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, rejected: Rejected) -> None:
        headers = self._headers.headers(rejected.flow_schema, rejected.priority_level)
        await send_rejection(scope, receive, send, rejected, headers, self._on_reject)

    def _sender(self, send: Send, admission: Admission, long_running: bool) -> Send:
        extra = None
        if self._headers_enabled:
            extra = self._headers.headers(admission.flow_schema, admission.priority_level)

        # A plain function handing back the server's awaitable, not a coroutine: no extra
        # frame per message. So the seats go back as the application hands the server its
        # last body message (or, long-running, its response start), just before the server
        # writes it; an error in that write changes nothing, release is idempotent.
        def send_and_release(message: Message) -> Awaitable[None]:
            kind = message["type"]
            if kind in _STARTS:
                if long_running:
                    admission.release()
                return send(with_headers(message, extra) if extra else message)
            if (
                kind in _BODIES and not message.get("more_body", False)
            ) or kind == "http.response.pathsend":
                admission.release()
            return send(message)

        return send_and_release

    def _lifespan_send(self, send: Send) -> Send:
        limiter = self._limiter

        async def lifespan_send(message: Message) -> None:
            await send(message)
            if message["type"] in _LIFESPAN_ENDS:
                limiter.close()

        return lifespan_send

    def __repr__(self) -> str:
        return f"<APFMiddleware {self._limiter!r} app={self.app!r}>"


def _check_identity(identity: object) -> None:
    if identity is not None and not isinstance(identity, Identity):
        raise TypeError(f"identify() must return an Identity or None, got {identity!r}")


def _expects_continue(scope: Scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"expect" and value.lower() == b"100-continue":
            return True
    return False


def _is_debug_path(path: str) -> bool:
    return path == DEBUG_PATH or path.startswith(DEBUG_PATH + "/")


def _load_debug_app(limiter: Limiter, authorize: AuthorizeHook | None) -> ASGIApp:
    try:
        endpoints = importlib.import_module("apf_limiter.observability")
    except ImportError as exc:
        raise ImportError(
            "APFMiddleware(debug_endpoints=True) needs apf_limiter.observability, "
            f"which could not be imported ({exc}); install a release that ships the debug "
            "endpoints or leave debug_endpoints off"
        ) from exc
    app: ASGIApp = endpoints.debug_app(limiter, authorize=authorize)
    return app
