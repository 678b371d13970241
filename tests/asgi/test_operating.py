"""Operating the middleware: the cap on open long-running requests, the queue-wait header."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from apf_limiter import Limiter
from apf_limiter._observer import Observer
from apf_limiter.asgi import APFMiddleware, RouteOptions
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.gate import Gate
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, websocket_scope
from tests.asgi.server import serve, wait_until

EVENTS = {"/events": RouteOptions(long_running=True)}


class _Recorder(Observer):
    def __init__(self) -> None:
        self.rejected: list[tuple[str, str, str]] = []

    def request_rejected(
        self, priority_level: str, flow_schema: str, reason: Any, queue_wait: float, exempt: bool
    ) -> None:
        self.rejected.append((priority_level, flow_schema, reason))


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/events``: an event stream open until the client leaves; ``/boom`` fails; else 200."""
    if scope["path"] == "/boom":
        raise RuntimeError("boom")
    if scope["path"] != "/events":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"data: hi\n\n", "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


def _caps(middleware: APFMiddleware) -> Gate:
    caps = middleware.gate
    assert caps is not None
    return caps


async def test_under_uvicorn_a_fourth_stream_over_a_cap_of_three_gets_429() -> None:
    observer = _Recorder()
    limiter = Limiter(level_config(limit=4), observer=observer)
    middleware = APFMiddleware(_app, limiter=limiter, paths=EVENTS, max_long_running={"*": 3})
    caps = _caps(middleware)
    async with serve(middleware, lifespan="off") as url, httpx.AsyncClient(base_url=url) as client:
        async with AsyncExitStack() as streams:
            opened = []
            chunks = []  # kept: a dropped iterator, finalized, would close its stream
            for _ in range(3):
                response = await streams.enter_async_context(client.stream("GET", "/events"))
                assert response.status_code == 200
                chunks.append(response.aiter_raw())
                assert await anext(chunks[-1]) == b"data: hi\n\n"
                opened.append(response)
            assert caps.open_long_running("everyone") == 3
            assert limiter.statistics().priority_levels["test"].executing_seats == 0
            fourth = await client.get("/events")
            assert fourth.status_code == 429
            assert fourth.headers["retry-after"] == "1"
            assert fourth.headers["x-apf-flow-schema"] == "everyone"
            assert fourth.headers["x-apf-priority-level"] == "test"
            # Other routes are not capped.
            assert [(await client.get("/fast")).status_code for _ in range(5)] == [200] * 5
            # One stream closes: its place goes back, and a new stream is admitted.
            await opened[0].aclose()
            await wait_until(lambda: caps.open_long_running("everyone") == 2)
            async with client.stream("GET", "/events") as again:
                assert again.status_code == 200
                chunk = again.aiter_raw()
                assert await anext(chunk) == b"data: hi\n\n"
                assert caps.open_long_running("everyone") == 3
        await wait_until(lambda: caps.open_long_running("everyone") == 0)
    assert observer.rejected == [("test", "everyone", "long-running-limit")]


async def test_named_schemas_have_their_own_cap_and_others_none() -> None:
    limiter = Limiter(level_config(limit=4))
    middleware = APFMiddleware(_app, limiter=limiter, paths=EVENTS, max_long_running={"x": 0})
    driver = Driver({"type": "http.disconnect"})
    await middleware(http_scope("/events"), driver.receive, driver.send)
    assert driver.start()["status"] == 200  # "everyone" is not capped
    middleware = APFMiddleware(
        _app, limiter=limiter, paths=EVENTS, max_long_running={"everyone": 0}
    )
    driver = Driver()
    await middleware(http_scope("/events"), driver.receive, driver.send)
    assert driver.start()["status"] == 429


async def test_the_count_goes_back_on_errors_cancellation_and_rejection() -> None:
    clock = FakeClock()
    limiter = Limiter(
        level_config(limit=1, queues=1, hand_size=1, queue_length_limit=1), clock=clock
    )
    marked = {"/events": RouteOptions(long_running=True), "/boom": RouteOptions(long_running=True)}
    middleware = APFMiddleware(_app, limiter=limiter, paths=marked, max_long_running={"*": 5})
    caps = _caps(middleware)
    driver = Driver()
    with pytest.raises(RuntimeError, match="boom"):
        await middleware(http_scope("/boom"), driver.receive, driver.send)
    assert caps.open_long_running("everyone") == 0
    # A stream holds its place (not its seat) until cancelled.
    task = asyncio.create_task(middleware(http_scope("/events"), Driver().receive, Driver().send))
    await clock.advance(0)
    assert caps.open_long_running("everyone") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert caps.open_long_running("everyone") == 0
    # Queued ones count; rejected by the level (queue full) or cancelled in the queue, they
    # count out too.
    hold = asyncio.Event()

    async def held(scope: Scope, receive: Receive, send: Send) -> None:
        await hold.wait()

    middleware.app = held
    first = asyncio.create_task(middleware(http_scope("/x"), Driver().receive, Driver().send))
    await clock.advance(0)
    queued = asyncio.create_task(middleware(http_scope("/events"), Driver().receive, Driver().send))
    await clock.advance(0)
    assert caps.open_long_running("everyone") == 1
    full = Driver()
    await middleware(http_scope("/events"), full.receive, full.send)
    assert full.start()["status"] == 429  # queue-full, from the level
    assert caps.open_long_running("everyone") == 1
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert caps.open_long_running("everyone") == 0
    hold.set()
    await first


@pytest.mark.parametrize("cap", [-1, 1.5, True, "3"])
def test_invalid_caps_are_refused(cap: Any) -> None:
    with pytest.raises(ValueError, match="max_long_running"):
        APFMiddleware(_app, max_long_running={"*": cap})


async def test_the_queue_wait_header_shows_the_wait_and_is_off_by_default() -> None:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=1), clock=clock)
    hold = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/hold":
            await hold.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = APFMiddleware(app, limiter=limiter, queue_wait_header="X-APF-Queue-Wait")
    first, second = Driver(), Driver()
    holding = asyncio.create_task(middleware(http_scope("/hold"), first.receive, first.send))
    await clock.advance(0)
    waiting = asyncio.create_task(middleware(http_scope("/b"), second.receive, second.send))
    await clock.advance(0.25)
    hold.set()
    await holding
    await waiting
    assert first.start()["headers"]["x-apf-queue-wait"] == "0"
    assert second.start()["headers"]["x-apf-queue-wait"] == "0.25"

    plain = Driver()
    await APFMiddleware(app, limiter=limiter)(http_scope("/b"), plain.receive, plain.send)
    assert "x-apf-queue-wait" not in plain.start()["headers"]


async def test_refusals_are_counted_in_the_rejected_requests_metric() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from apf_limiter.observability import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(level_config(limit=4), observer=metrics)
    metrics.bind(limiter)
    middleware = APFMiddleware(_app, limiter=limiter, paths=EVENTS, max_long_running={"*": 0})
    for _ in range(2):
        driver = Driver()
        await middleware(http_scope("/events"), driver.receive, driver.send)
        assert driver.start()["status"] == 429
    labels = {"priority_level": "test", "flow_schema": "everyone", "reason": "long-running-limit"}
    assert registry.get_sample_value("apf_flowcontrol_rejected_requests_total", labels) == 2


async def test_a_websocket_over_the_cap_is_closed_before_accept() -> None:
    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})

    limiter = Limiter(level_config(limit=4))
    middleware = APFMiddleware(echo, limiter=limiter, max_long_running={"everyone": 0})
    driver = Driver({"type": "websocket.connect"})
    await middleware(websocket_scope(), driver.receive, driver.send)
    assert driver.sent == [{"type": "websocket.close", "code": 1013, "reason": ""}]
