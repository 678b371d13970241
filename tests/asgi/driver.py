"""A hand-rolled ASGI server for tests: ``receive`` reads a queue, ``send`` records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from apf_limiter.asgi._types import Message, Scope


class Driver:
    """Feeds an app's ``receive`` from a queue and records what it sends."""

    def __init__(self, *messages: Message) -> None:
        self.incoming: asyncio.Queue[Message] = asyncio.Queue()
        for message in messages:
            self.incoming.put_nowait(message)
        self.sent: list[Message] = []
        self.receive_calls = 0

    async def receive(self) -> Message:
        self.receive_calls += 1
        return await self.incoming.get()

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def start(self) -> dict[str, Any]:
        """The response-start message sent, as a dict with lower-case string headers."""
        (start,) = [m for m in self.sent if m["type"].endswith(("response.start", ".accept"))]
        headers = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
        return {**start, "headers": headers}


def http_scope(path: str = "/", method: str = "GET", **extra: Any) -> Scope:
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("10.0.0.7", 50000),
        "server": ("127.0.0.1", 8000),
    }
    scope.update(extra)
    return scope


def websocket_scope(path: str = "/ws", **extra: Any) -> Scope:
    scope = http_scope(path, **extra)
    scope["type"] = "websocket"
    del scope["method"]
    return scope


async def settle(predicate: Callable[[], bool], rounds: int = 1000) -> None:
    """Let other tasks run (no real time passes) until ``predicate`` holds."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def ok_app(scope: Scope, receive: Any, send: Any) -> None:
    """Answers 200 ``ok`` without reading the request."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
