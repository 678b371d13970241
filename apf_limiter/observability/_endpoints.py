"""ASGI apps for the debug endpoints and ``/metrics``, guarded by an ``authorize`` hook.

:func:`debug_app` serves, under ``/debug/api_priority_and_fairness``:

* ``dump_priority_levels``, ``dump_queues``, ``dump_requests`` (``?includeRequestDetails=1``):
  the Kubernetes dumps as aligned text, or JSON with ``?format=json``;
* ``dump_top_flows``: who is flooding, the top flows of each level (``?top=N``), same forms;
* ``dashboard``: the live HTML dashboard, and its JSON feed at ``dashboard?format=json``;
* the prefix itself: a plain index of the above.

It answers both at its full path (mounted at the root, as the middleware does) and under a
mount point (e.g. Starlette's ``Mount("/debug/api_priority_and_fairness", app=...)`` or any
other prefix). Every request is denied with 403 unless ``authorize(scope)`` returns ``True``;
with no hook, everything is denied.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apf_limiter._warn_once import WarnOnce
from apf_limiter.observability._asgi import (
    ASGIApp,
    Authorize,
    Receive,
    Scope,
    Send,
    is_authorized,
    query,
    respond,
    serve_lifespan,
)
from apf_limiter.observability._dashboard import dashboard_feed
from apf_limiter.observability._dashboard_page import DASHBOARD_HTML, DASHBOARD_SCRIPT
from apf_limiter.observability._debug_text import (
    Dump,
    dump_priority_levels,
    dump_queues,
    dump_requests,
    dump_top_flows,
)
from apf_limiter.observability._multiprocess import multiprocess_dir
from apf_limiter.observability._multiprocess_exposition import MultiprocessExposition
from apf_limiter.observability._top_flows import DEFAULT_TOP, MAX_TOP, check_top, hash_key

if TYPE_CHECKING:
    from apf_limiter.limiter import Limiter

DEBUG_PREFIX = "/debug/api_priority_and_fairness"
"""Where Kubernetes serves its APF debug endpoints."""

_TEXT = "text/plain; charset=utf-8"
_JSON = "application/json"
_HTML = "text/html; charset=utf-8"
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(DASHBOARD_SCRIPT.encode()).digest()).decode()
_DASHBOARD_HEADERS = (
    (
        b"content-security-policy",
        (
            "default-src 'none'; connect-src 'self'; style-src 'unsafe-inline'; "
            f"script-src 'sha256-{_SCRIPT_HASH}'; frame-ancestors 'none'; base-uri 'none'"
        ).encode(),
    ),
    (b"referrer-policy", b"no-referrer"),
)
_PAGE = DASHBOARD_HTML.encode()
_INDEX = """API Priority and Fairness debug endpoints:
  dump_priority_levels   one row per priority level   (?format=json)
  dump_queues            one row per queue            (?format=json)
  dump_requests          one row per request          (?includeRequestDetails=1, ?format=json)
  dump_top_flows         top flows of each level      (?top=N, ?format=json)
  dashboard              live HTML dashboard          (?format=json for its feed)
"""


def _route_path(scope: Scope) -> str:
    """The path below the mount point, with the Kubernetes prefix (if any) removed."""
    path: str = scope.get("path", "")
    root_path: str = scope.get("root_path", "")
    if (
        root_path
        and path.startswith(root_path)
        and path != root_path
        and path[len(root_path)] == "/"
    ):
        path = path[len(root_path) :]
    if path == DEBUG_PREFIX or path.startswith(DEBUG_PREFIX + "/"):
        path = path[len(DEBUG_PREFIX) :]
    return path.rstrip("/") or "/"


def debug_app(
    limiter: Limiter,
    *,
    authorize: Authorize | None = None,
    top_flows: int = DEFAULT_TOP,
    hash_distinguishers: bool | bytes = False,
) -> DebugApp:
    """Create the ASGI app of the APF debug endpoints of ``limiter``.

    Args:
        limiter: The limiter whose state the endpoints show.
        authorize: ``authorize(scope) -> bool`` (or an async function): whether the request
            described by the ASGI scope may see the endpoints. Only ``True`` allows; ``None``
            (the default) denies everything.
        top_flows: How many flows of each ranking (seats, waiting, rejections) the dashboard
            shows per level, and ``dump_top_flows`` unless asked for ``?top=N`` (0 to 100).
        hash_distinguishers: In the top flows (dashboard and ``dump_top_flows``) and in
            ``dump_requests`` (distinguishers, and the details' user), show each
            distinguisher as a short stable hash: ``True`` unkeyed, or a key of up to 64
            bytes (see :func:`dump_top_flows`).

    Returns:
        An ASGI app. Run it on the event loop of ``limiter``: the dumps read its state
        directly.

    Raises:
        ValueError: If ``top_flows`` or ``hash_distinguishers`` is invalid.
    """
    return DebugApp(limiter, authorize, top_flows, hash_distinguishers)


class DebugApp:
    """The debug endpoints as an ASGI app (see :func:`debug_app`).

    An object rather than a function, so that Starlette's ``Route`` treats it as an ASGI app.
    """

    def __init__(
        self,
        limiter: Limiter,
        authorize: Authorize | None,
        top_flows: int = DEFAULT_TOP,
        hash_distinguishers: bool | bytes = False,
    ) -> None:
        self.limiter = limiter
        self.authorize = authorize
        self.top_flows = check_top(top_flows)
        hash_key(hash_distinguishers)  # checked now rather than at the first request
        self.hash_distinguishers = hash_distinguishers
        self._warn = WarnOnce()
        if authorize is None:
            self._warn(
                "debug-no-authorize",
                "the APF debug endpoints have no authorize hook, so they answer 403 to every "
                "request; pass authorize=, e.g. lambda scope: <is this an operator?>",
            )
        self._tables: dict[str, Callable[[dict[str, str]], Dump]] = {
            "/dump_priority_levels": lambda _: dump_priority_levels(limiter),
            "/dump_queues": lambda _: dump_queues(limiter),
            "/dump_requests": lambda params: dump_requests(
                limiter,
                include_details=bool(params.get("includeRequestDetails")),
                hash_distinguishers=self.hash_distinguishers,
            ),
            "/dump_top_flows": lambda params: dump_top_flows(
                limiter,
                top=_top_param(params.get("top"), self.top_flows),
                hash_distinguishers=self.hash_distinguishers,
            ),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        kind = scope["type"]
        if kind == "lifespan":
            await serve_lifespan(receive, send)
            return
        if kind != "http":
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        if not await is_authorized(self.authorize, scope, self._warn):
            await respond(scope, send, 403, b"Forbidden\n", _TEXT)
            return
        if scope.get("method", "GET") not in ("GET", "HEAD"):
            await respond(
                scope, send, 405, b"Method Not Allowed\n", _TEXT, ((b"allow", b"GET, HEAD"),)
            )
            return
        path = _route_path(scope)
        params = query(scope)
        as_json = params.get("format") == "json"
        table = self._tables.get(path)
        if table is not None:
            rows = table(params)
            if as_json:
                await respond(scope, send, 200, _json(rows.json_rows()), _JSON)
            else:
                await respond(scope, send, 200, rows.text().encode(), _TEXT)
        elif path == "/dashboard":
            if as_json:
                feed = dashboard_feed(
                    self.limiter,
                    top_flows=self.top_flows,
                    hash_distinguishers=self.hash_distinguishers,
                )
                await respond(scope, send, 200, _json(feed), _JSON)
            else:
                await respond(scope, send, 200, _PAGE, _HTML, _DASHBOARD_HEADERS)
        elif path == "/":
            await respond(scope, send, 200, _INDEX.encode(), _TEXT)
        else:
            await respond(scope, send, 404, b"Not Found\n", _TEXT)


def _top_param(value: str | None, default: int) -> int:
    """``?top=N``, clamped to 1 to 100; the app's default when absent or not a number."""
    if value is None or not value.isdigit():
        return default
    return min(MAX_TOP, max(1, int(value)))


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def metrics_app(registry: Any = None, *, authorize: Authorize | None = None) -> MetricsApp:
    """Create an ASGI app serving a Prometheus registry, for ``/metrics``.

    Works with Starlette and FastAPI: ``Route("/metrics", metrics_app())`` in the routes, or
    ``app.add_route("/metrics", metrics_app())`` (a ``Mount`` works too but redirects
    ``/metrics`` to ``/metrics/``). Content negotiation (text or OpenMetrics) and gzip follow
    ``prometheus_client``. Scrapes then run on the event loop, where reading the limiter's
    state is safe. With ``PROMETHEUS_MULTIPROC_DIR`` set (several worker processes), it
    serves the whole process group from that directory instead of ``registry``.

    Args:
        registry: A ``prometheus_client.CollectorRegistry``; ``None`` is the global registry.
        authorize: Unlike the debug endpoints, metrics are open by default (Prometheus
            scrapers rarely authenticate); pass a hook to guard them (403 unless it returns
            ``True``).

    Raises:
        ImportError: If ``prometheus_client`` is not installed (``apf_limiter[prometheus]``).
    """
    return MetricsApp(registry, authorize)


class MetricsApp:
    """A Prometheus registry as an ASGI app (see :func:`metrics_app`)."""

    def __init__(self, registry: Any, authorize: Authorize | None) -> None:
        from apf_limiter.observability._metrics import require_prometheus_client

        prometheus_client = require_prometheus_client()
        self.registry = prometheus_client.REGISTRY if registry is None else registry
        self.authorize = authorize
        self._warn = WarnOnce()
        self._inner: ASGIApp = prometheus_client.make_asgi_app(self.registry)
        directory = multiprocess_dir()
        if directory is not None:
            # Worker processes: every one's metrics, read from PROMETHEUS_MULTIPROC_DIR.
            self._inner = MultiprocessExposition(directory)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        kind = scope["type"]
        if kind == "lifespan":
            await serve_lifespan(receive, send)
            return
        if kind != "http":
            return
        if self.authorize is not None and not await is_authorized(
            self.authorize, scope, self._warn
        ):
            await respond(scope, send, 403, b"Forbidden\n", _TEXT)
            return
        await self._inner(scope, receive, send)
