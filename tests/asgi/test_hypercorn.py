"""Under a real hypercorn (asyncio worker): no client's disconnect is lost.

hypercorn reports a disconnect once. When it came in the event-loop turn in which the request
was admitted from its queue, the disconnect watcher dropped it: the application ran for a
client that had left, and a long-running request kept its ``max_long_running`` place for good.
Here the seat is freed by a client leaving too (its request waits for its disconnect), and
both clients close at once, so that both departures reach the server in the same turn.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send
from tests.asgi.apps import level_config, user_from_header
from tests.asgi.server import serve_hypercorn, wait_until

pytestmark = pytest.mark.timeout(120)

ROUNDS = 25


async def until_disconnect(scope: Scope, receive: Receive, send: Send) -> None:
    """``/events`` streams, ``/hold`` holds its seat: both until the client leaves."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/events":
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: hello\n\n", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


async def _open(url: str, path: str, user: str) -> asyncio.StreamWriter:
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nhost: t\r\nx-user: {user}\r\n\r\n".encode())
    await writer.drain()
    return writer


def _close_now(writer: asyncio.StreamWriter) -> None:
    # A reset, sent at once: no half-close, no lingering.
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.close()


async def test_event_stream_clients_leaving_as_they_are_admitted_free_their_places() -> None:
    limiter = Limiter(level_config(limit=1, wait_limit=30))
    middleware = APFMiddleware(
        until_disconnect,
        limiter=limiter,
        identify=user_from_header,
        long_running=lambda scope: scope["path"] == "/events",
        max_long_running={"*": ROUNDS + 1},
    )
    caps = middleware._long_running_caps
    assert caps is not None
    leaked = 0
    async with serve_hypercorn(middleware) as url:
        for i in range(ROUNDS):
            holder = await _open(url, "/hold", f"holder{i}")
            await wait_until(lambda: limiter.statistics().executing_requests == 1)
            stream = await _open(url, "/events", f"stream{i}")
            await wait_until(lambda: limiter.statistics().waiting_requests == 1)
            await asyncio.sleep(0.01)  # the watcher's receive() is waiting
            # Both leave at once: the holder's departure frees the seat, admitting the
            # stream in the same turn as its own departure comes in. In which order the
            # server reads the two decides which of the watcher's steps the admission meets
            # (its receive() done, or the message taken too): alternate.
            first, second = (holder, stream) if i % 2 == 0 else (stream, holder)
            _close_now(first)
            _close_now(second)
            settled = leaked  # the places leaked so far stay taken

            def freed(settled: int = settled) -> bool:
                return caps.open_requests("everyone") == settled

            try:
                await wait_until(freed, timeout=1)
            except AssertionError:
                leaked += 1  # a lost disconnect: the stream runs on for a client gone
            await wait_until(lambda: limiter.statistics().waiting_requests == 0)
        assert leaked == 0, f"{leaked} of {ROUNDS} places leaked"
        assert limiter.statistics().waiting_requests == 0
