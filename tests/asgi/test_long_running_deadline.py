"""Long-running requests and WebSockets have a deadline and a body rate until they start.

A long-running route gave its seats back only when its response started, and had neither a
deadline nor a minimum body rate: eight long polls that never answered, or eight uploads at
1 B/s to a long-running POST route, held eight seats for good. Now both apply to every request
until its response starts (a WebSocket: until it is accepted); from then on a long-running
request is exempt, as before. In fake time (``FakeClock``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware, RouteOptions
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, settle, websocket_scope

pytestmark = pytest.mark.timeout(60)

LONG = {"/": RouteOptions(long_running=True), "/ws": RouteOptions(long_running=True)}


class Poll:
    """A long poll: optionally reads its body or starts its response, then hangs."""

    def __init__(self, *, start: bool = False, read: bool = False) -> None:
        self.start = start
        self.read = read
        self.calls = 0
        self.cancelled = False
        self.received: list[Message] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        try:
            if self.start:
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b"data\n", "more_body": True})
            if self.read:
                while True:
                    message = await receive()
                    self.received.append(message)
                    if not message.get("more_body"):
                        break
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def _setup(**middleware: Any) -> tuple[FakeClock, Limiter, dict[str, Any]]:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=1, wait_limit=30), clock=clock)
    options = {"limiter": limiter, "paths": LONG, "max_long_running": {"*": 5}, **middleware}
    return clock, limiter, options


def _statuses(driver: Driver) -> list[int]:
    return [m["status"] for m in driver.sent if m["type"].endswith("http.response.start")]


def _open(middleware: APFMiddleware) -> int:
    caps = middleware._long_running_caps
    assert caps is not None
    return caps.open_requests("everyone")


def _upload(body: int) -> Scope:
    return http_scope(method="POST", headers=[(b"content-length", str(body).encode())])


async def test_a_long_poll_that_never_answers_meets_its_deadline() -> None:
    clock, limiter, options = _setup(request_timeout=5)
    app = Poll()
    middleware = APFMiddleware(app, **options)
    driver = Driver()
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await settle(lambda: app.calls == 1)
    assert limiter.statistics().executing_requests == 1 and _open(middleware) == 1
    await clock.advance(4.999)
    assert not task.done()
    await clock.advance(0.001)
    await task
    assert app.cancelled and _statuses(driver) == [504]
    assert limiter.statistics().executing_requests == 0 and _open(middleware) == 0


async def test_a_long_running_request_is_exempt_once_its_response_started() -> None:
    clock, limiter, options = _setup(request_timeout=5, body_rate_grace=1)
    app = Poll(start=True)
    middleware = APFMiddleware(app, **options)
    driver = Driver()
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await settle(lambda: app.calls == 1 and len(driver.sent) == 2)
    assert limiter.statistics().executing_requests == 0  # its seat went back as it started
    await clock.advance(3600)
    assert not task.done() and not app.cancelled
    assert clock.pending_timers == 0  # nothing tracks it any more
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _open(middleware) == 0


async def test_a_slow_upload_to_a_long_running_route_is_answered_408() -> None:
    clock, limiter, options = _setup(body_rate_grace=1, min_body_rate=100)
    app = Poll(read=True)
    middleware = APFMiddleware(app, **options)
    driver = Driver({"type": "http.request", "body": b"x", "more_body": True})
    task = asyncio.create_task(middleware(_upload(10_000), driver.receive, driver.send))
    await settle(lambda: len(app.received) == 1)
    await clock.advance(1.009)  # 1 byte: due 1 s + 1/100 s into the wait
    assert not task.done()
    await clock.advance(0.002)
    await task
    assert app.cancelled and _statuses(driver) == [408]
    assert limiter.statistics().executing_requests == 0 and _open(middleware) == 0


async def test_a_slow_upload_waiting_in_a_queue_for_a_long_running_route_is_answered_408() -> None:
    clock, limiter, options = _setup(body_rate_grace=1, min_body_rate=100)
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    app = Poll(read=True)
    middleware = APFMiddleware(app, **options)
    driver = Driver({"type": "http.request", "body": b"x", "more_body": True})
    task = asyncio.create_task(middleware(_upload(10_000), driver.receive, driver.send))
    await settle(lambda: driver.receive_calls == 2)  # read while queued, waits for more
    await clock.advance(1.011)
    await task
    assert app.calls == 0 and _statuses(driver) == [408]
    level = limiter.statistics().priority_levels["test"]
    assert (level.waiting_requests, level.cancelled) == (0, 1) and _open(middleware) == 0
    held.release()


async def test_a_long_running_request_reads_its_body_at_leisure_once_it_answered() -> None:
    clock, _, options = _setup(request_timeout=5, body_rate_grace=1, min_body_rate=100)
    app = Poll(start=True, read=True)
    middleware = APFMiddleware(app, **options)
    driver = Driver({"type": "http.request", "body": b"x", "more_body": True})
    task = asyncio.create_task(middleware(_upload(10_000), driver.receive, driver.send))
    await settle(lambda: len(app.received) == 1)
    await clock.advance(3600)
    assert not task.done() and not app.cancelled
    driver.incoming.put_nowait({"type": "http.request", "body": b"y", "more_body": False})
    await settle(lambda: len(app.received) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("denial", [False, True])
async def test_a_websocket_never_accepted_meets_its_deadline(denial: bool) -> None:
    clock, limiter, options = _setup(request_timeout=5)
    connected = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        connected.set()
        await asyncio.Event().wait()  # never accepts

    extensions: dict[str, Any] = {"websocket.http.response": {}} if denial else {}
    driver = Driver({"type": "websocket.connect"})
    middleware = APFMiddleware(app, **options)
    scope = websocket_scope(extensions=extensions)
    task = asyncio.create_task(middleware(scope, driver.receive, driver.send))
    await connected.wait()
    await clock.advance(5)
    await task
    if denial:
        assert _statuses(driver) == [504]
    else:
        assert [m["type"] for m in driver.sent] == ["websocket.close"]
    assert limiter.statistics().executing_requests == 0 and _open(middleware) == 0
