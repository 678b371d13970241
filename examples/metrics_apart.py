"""``/metrics`` kept from strangers: behind a bearer token, and on a loopback-only port.

A scrape runs on the event loop (or in the thread of a separate metrics server), and the
built-in configuration exempts ``/metrics`` so that scrapes work in an overload: where the
app's port is reachable from outside, nobody else should be able to scrape it in a loop.
This example shows both guards; keep the one that fits your deployment.

Run it (from the repository root) and try it::

    APF_METRICS_TOKEN=s3cret uvicorn examples.metrics_apart:app
    curl -i http://127.0.0.1:8000/metrics                             # 403
    curl -H 'Authorization: Bearer s3cret' http://127.0.0.1:8000/metrics
    curl http://127.0.0.1:9100/metrics       # the same registry, on loopback only

``APF_METRICS_PORT`` chooses the loopback port (default 9100; 0 picks a free one, and
``metrics_server_address`` says which). Without ``APF_METRICS_TOKEN`` the ``/metrics`` route
of the app refuses every scrape: the loopback port is then the only way in.
"""

from __future__ import annotations

import hmac
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from apf_limiter.observability import PrometheusMetrics, metrics_app

registry = CollectorRegistry()
metrics = PrometheusMetrics(registry)
limiter = Limiter(observer=metrics)  # the built-in configuration: /metrics is exempt
metrics.bind(limiter)

#: Where the loopback-only metrics server listens, once the app has started.
metrics_server_address: tuple[str, int] | None = None


def bearer_token_matches(scope: dict[str, Any]) -> bool:
    """The ``authorize`` hook of ``metrics_app``: ``Authorization: Bearer <APF_METRICS_TOKEN>``."""
    token = os.environ.get("APF_METRICS_TOKEN", "")
    if not token:
        return False  # no token configured: nobody scrapes through the app's port
    expected = f"Bearer {token}".encode()
    for name, value in scope["headers"]:
        if name == b"authorization":
            return hmac.compare_digest(value, expected)  # in constant time
    return False


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one access-log line per scrape is noise


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Serve the same registry on 127.0.0.1:``APF_METRICS_PORT`` while the app runs.

    prometheus_client's WSGI app in a thread of its own (what ``start_http_server`` does, but
    stoppable): a scrape from that thread reads the limiter as one from the event loop would.
    """
    global metrics_server_address
    port = int(os.environ.get("APF_METRICS_PORT", "9100"))
    server: WSGIServer = make_server(
        "127.0.0.1", port, make_wsgi_app(registry), handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    metrics_server_address = ("127.0.0.1", server.server_address[1])
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        metrics_server_address = None


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


app = APFMiddleware(
    Starlette(
        routes=[
            Route("/", home),
            Route("/metrics", metrics_app(registry, authorize=bearer_token_matches)),
        ],
        lifespan=lifespan,
    ),
    limiter=limiter,
    # This app has no authentication: every request is anonymous (and the middleware need
    # not warn that the Authorization header of a scrape came with no user).
    identify=lambda scope: None,
)
