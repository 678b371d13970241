"""Run an ASGI app under uvicorn in the test's own event loop, on a free 127.0.0.1 port."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from apf_limiter.asgi._types import ASGIApp


@asynccontextmanager
async def serve(app: ASGIApp, **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://127.0.0.1:<port>``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    options: dict[str, Any] = {
        "log_config": None,
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 2,
    }
    options.update(config)
    server = uvicorn.Server(uvicorn.Config(app, **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.005)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` (every 5 ms) until it holds; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@asynccontextmanager
async def serve_hypercorn(app: ASGIApp, **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` under hypercorn's asyncio worker until the block ends; yields its base URL."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on: the URL works at once
    port = sock.getsockname()[1]
    settings = Config()
    settings.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) the socket
    settings.graceful_timeout = 2
    settings.accesslog = None
    settings.errorlog = None
    for name, value in config.items():
        setattr(settings, name, value)
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn_serve(app, settings, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
