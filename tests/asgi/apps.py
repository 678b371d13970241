"""Test applications (Starlette and FastAPI flavours of the same endpoints) and configs."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, Identity, route_options
from apf_limiter.asgi._types import Scope
from tests.helpers import EVERYONE_EVERYTHING

Flavour = Literal["starlette", "fastapi"]
FLAVOURS: tuple[Flavour, ...] = ("starlette", "fastapi")


def level_config(
    *,
    limit: int,
    reject: bool = False,
    queues: int = 64,
    hand_size: int = 6,
    queue_length_limit: int = 50,
    wait_limit: float = 15.0,
) -> dict[str, Any]:
    """One level ``test`` of exactly ``limit`` seats (maxSeats ``limit``), fair per user."""
    if reject:
        response: dict[str, Any] = {"type": "Reject"}
    else:
        queuing = {"queues": queues, "handSize": hand_size, "queueLengthLimit": queue_length_limit}
        response = {"type": "Queue", "queuing": queuing}
    return {
        "serverConcurrencyLimit": limit,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [
            {
                "name": "test",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "lendablePercent": 0,
                    "limitResponse": response,
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "everyone",
                "priorityLevelConfiguration": {"name": "test"},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": EVERYONE_EVERYTHING,
            }
        ],
    }


def user_from_header(scope: Scope) -> Identity | None:
    """An ``identify`` hook: the ``x-user`` request header names the user."""
    for name, value in scope["headers"]:
        if name == b"x-user":
            return Identity(value.decode())
    return None


class Probe:
    """What the endpoints saw, and gates that hold them until the test opens them."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    def open(self, name: str) -> None:
        self.gate(name).set()


def _handlers(probe: Probe) -> dict[str, Any]:
    async def fast(request: Request) -> Response:
        probe.entered.append(request.url.path)
        apf = request.state.apf
        return JSONResponse(
            {
                "flow_schema": apf.flow_schema,
                "priority_level": apf.priority_level,
                "seats": apf.seats,
                "queue_wait": apf.queue_wait,
            }
        )

    async def hold(request: Request) -> Response:
        name = request.query_params.get("gate", "hold")
        probe.entered.append(f"{request.url.path}?{name}")
        await probe.gate(name).wait()
        return PlainTextResponse("held")

    async def sleep(request: Request) -> Response:
        await asyncio.sleep(float(request.query_params.get("s", "0.05")))
        return PlainTextResponse("slept")

    async def upload(request: Request) -> Response:
        probe.entered.append(request.url.path)
        digest = hashlib.sha256()
        size = 0
        async for chunk in request.stream():
            digest.update(chunk)
            size += len(chunk)
        return JSONResponse({"sha256": digest.hexdigest(), "size": size})

    async def boom(request: Request) -> Response:
        probe.entered.append(request.url.path)
        raise RuntimeError("boom")

    async def stream(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"first\n"
            await probe.gate("stream").wait()
            yield b"last\n"

        return StreamingResponse(body(), media_type="text/plain")

    @route_options(long_running=True)
    async def events(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b"data: one\n\n"
            await probe.gate("events").wait()
            yield b"data: two\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def firehose(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            chunk = b"x" * 65536
            while True:  # until the client stops reading and the deadline ends it
                yield chunk

        return StreamingResponse(body(), media_type="application/octet-stream")

    @route_options(seats=3)
    async def heavy(request: Request) -> Response:
        return JSONResponse({"seats": request.state.apf.seats})

    async def websocket(ws: WebSocket) -> None:
        await ws.accept()
        probe.entered.append("/ws")
        text = await ws.receive_text()
        await probe.gate("ws").wait()
        await ws.send_text(f"echo {text}")
        await ws.close()

    return {
        "/fast": fast,
        "/hold": hold,
        "/sleep": sleep,
        "/upload": upload,
        "/boom": boom,
        "/stream": stream,
        "/firehose": firehose,
        "/events": events,
        "/heavy": heavy,
        "/ws": websocket,
    }


def make_app(flavour: Flavour, probe: Probe, **middleware: Any) -> Starlette:
    """A Starlette or FastAPI app with the test endpoints behind ``APFMiddleware``."""
    handlers = _handlers(probe)
    app: Starlette
    if flavour == "starlette":
        routes: list[Any] = [
            Route(path, handler, methods=["GET", "POST"])
            for path, handler in handlers.items()
            if path != "/ws"
        ]
        routes.append(WebSocketRoute("/ws", handlers["/ws"]))
        app = Starlette(routes=routes)
    else:
        api = FastAPI()
        for path, handler in handlers.items():
            if path == "/ws":
                api.add_api_websocket_route(path, handler)
            else:
                api.add_api_route(path, handler, methods=["GET", "POST"])
        app = api
    middleware.setdefault("identify", user_from_header)
    app.add_middleware(APFMiddleware, **middleware)
    return app


def middleware_of(app: Starlette) -> APFMiddleware:
    """The ``APFMiddleware`` of a started app."""
    stack: Any = app.middleware_stack
    while stack is not None and not isinstance(stack, APFMiddleware):
        stack = getattr(stack, "app", None)
    assert isinstance(stack, APFMiddleware), "the app has not started"
    return stack


def limiter_of(app: Starlette) -> Limiter:
    """The limiter of the ``APFMiddleware`` of a started app."""
    return middleware_of(app).limiter
