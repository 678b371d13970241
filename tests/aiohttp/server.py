"""A real aiohttp server on 127.0.0.1 for the aiohttp front door's tests, and its endpoints."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from apf_limiter.aiohttp import AiohttpMiddleware, setup
from apf_limiter.gate import Identity, route_options
from tests.asgi.apps import Probe


def user_from_header(request: web.Request) -> Identity | None:
    """An ``identify`` hook: the ``x-user`` request header names the user."""
    user = request.headers.get("x-user")
    return Identity(user) if user else None


def make_app(probe: Probe, **options: Any) -> tuple[web.Application, AiohttpMiddleware]:
    """An application with the middleware installed by ``setup`` (``identify``: ``x-user``)."""

    async def fast(request: web.Request) -> web.Response:
        probe.entered.append(request.path)
        return web.Response(text="ok")

    async def hold(request: web.Request) -> web.Response:
        probe.entered.append(request.path)
        await asyncio.wait_for(probe.gate(request.query.get("gate", "hold")).wait(), 10)
        return web.Response(text="held")

    async def sleep(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("s", "0.02")))
        return web.Response(text="slept")

    async def fail(request: web.Request) -> web.Response:
        probe.entered.append(request.path)
        raise RuntimeError("the handler failed")

    @route_options(long_running=True)
    async def events(request: web.Request) -> web.StreamResponse:
        probe.entered.append(request.path)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: 1\n\n")
        try:
            await asyncio.wait_for(probe.gate("events").wait(), 10)
        except asyncio.CancelledError:
            probe.entered.append("cancelled")
            raise
        await response.write(b"data: 2\n\n")
        return response

    async def stream(request: web.Request) -> web.StreamResponse:
        probe.entered.append(request.path)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"part\n")
        await asyncio.sleep(10)  # the deadline aborts it
        return response

    async def cloned(request: web.Request) -> web.StreamResponse:
        # Streams on a clone of the request, as a handler that rewrites its URL may.
        probe.entered.append(request.path)
        response = web.StreamResponse()
        await response.prepare(request.clone(rel_url="/cloned?rewritten=1"))
        await response.write(b"part\n")
        await asyncio.sleep(10)  # the deadline aborts it
        return response

    async def socket(request: web.Request) -> web.WebSocketResponse:
        probe.entered.append(request.path)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str(message.data)
        return ws

    app = web.Application()
    options.setdefault("identify", user_from_header)
    middleware = setup(app, **options)
    app.router.add_get("/fast", fast)
    app.router.add_get("/hold", hold)
    app.router.add_get("/sleep", sleep)
    app.router.add_get("/fail", fail)
    app.router.add_get("/events", events)
    app.router.add_get("/stream", stream)
    app.router.add_get("/ws", socket)
    app.router.add_get("/cloned", cloned)
    return app, middleware


@asynccontextmanager
async def serve(app: web.Application, *, handler_cancellation: bool = False) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1; yields its base URL."""
    runner = web.AppRunner(
        app, handler_cancellation=handler_cancellation, access_log=None, shutdown_timeout=1
    )
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await asyncio.wait_for(runner.cleanup(), 10)
        sock.close()
