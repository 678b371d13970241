"""aiohttp behind the APF middleware, on the built-in default configuration.

Run it (from the repository root) and try it::

    python -m examples.aiohttp_app              # serves http://127.0.0.1:8080
    curl -i http://127.0.0.1:8080/              # x-apf-flow-schema: anonymous
    curl -i -H 'x-user: alice' 'http://127.0.0.1:8080/slow?seconds=2'
    curl -N http://127.0.0.1:8080/events        # long-running: its seat goes back at once
    curl -i http://127.0.0.1:8080/healthz       # probes are exempt

With no configuration the middleware uses the built-in web-app default: health probes exempt,
anonymous traffic fair per client IP (``workload-low``), authenticated traffic fair per user
(``global-default``). Here the ``x-user`` header stands for authentication. The server runs
with ``handler_cancellation=True``, so a client that leaves while queued is noticed at once.
"""

from __future__ import annotations

import asyncio
import math

from aiohttp import web

from apf_limiter.aiohttp import setup
from apf_limiter.gate import Identity, SlowClients, route_options


def identify(request: web.Request) -> Identity | None:
    """Who sent the request: the ``x-user`` header (a real app asks its authentication)."""
    user = request.headers.get("x-user")
    return Identity(user, ("users",)) if user else None


async def home(request: web.Request) -> web.Response:
    return web.json_response({"hello": request.headers.get("x-user", "anonymous")})


async def slow(request: web.Request) -> web.Response:
    seconds = float(request.query.get("seconds", "1"))
    if not (0 <= seconds <= 30) or math.isnan(seconds):
        raise web.HTTPBadRequest(text="seconds must be between 0 and 30")
    await asyncio.sleep(seconds)
    return web.json_response({"slept": seconds})


@route_options(long_running=True)  # a stream: its seat goes back once it starts
async def events(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for tick in range(int(request.query.get("ticks", "5"))):
        await response.write(f"data: {tick}\n\n".encode())
        await asyncio.sleep(0.2)
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app() -> web.Application:
    """The example application, guarded by the APF middleware."""
    app = web.Application()
    # Deadline of 10 s (504 after it), identity from the request.
    setup(app, identify=identify, slow_clients=SlowClients(request_timeout=10))
    app.router.add_get("/", home)
    app.router.add_get("/slow", slow)
    app.router.add_get("/events", events)
    app.router.add_get("/healthz", healthz)
    return app


if __name__ == "__main__":
    web.run_app(make_app(), host="127.0.0.1", port=8080, handler_cancellation=True)
