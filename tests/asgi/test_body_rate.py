"""The minimum request-body data rate, in fake time: 408 for a body that comes too slowly."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._body_rate import timed_receive
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app, settle

pytestmark = pytest.mark.timeout(60)


class Reader:
    """Reads the whole body (optionally after a pause in fake time), then answers 200."""

    def __init__(self, clock: FakeClock, pause: float = 0.0) -> None:
        self.clock = clock
        self.pause = pause
        self.calls = 0
        self.received: list[Message] = []
        self.receive: Receive | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        self.receive = receive
        if self.pause:
            done = asyncio.get_running_loop().create_future()
            self.clock.call_later(self.pause, done.set_result, None)
            await done
        while True:
            message = await receive()
            self.received.append(message)
            if not message.get("more_body", False):
                break
        await ok_app(scope, receive, send)


def _post(size: int = 100_000) -> Scope:
    return http_scope("/upload", method="POST", headers=[(b"content-length", str(size).encode())])


def _chunk(data: bytes, more: bool = True) -> Message:
    return {"type": "http.request", "body": data, "more_body": more}


def _trickle(clock: FakeClock, driver: Driver, size: int, every: float, count: int) -> None:
    """Schedule ``count`` chunks of ``size`` bytes, one every ``every`` seconds of fake time."""
    for i in range(1, count + 1):
        clock.call_later(i * every, driver.incoming.put_nowait, _chunk(b"x" * size, i < count))


def _status(driver: Driver) -> int | None:
    starts = [m for m in driver.sent if m["type"] == "http.response.start"]
    return starts[0]["status"] if starts else None


def _setup(limit: int = 1, **middleware: Any) -> tuple[FakeClock, Limiter, dict[str, Any]]:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=limit), clock=clock)
    return clock, limiter, {"limiter": limiter, **middleware}


async def test_a_body_that_never_comes_gets_408_after_the_grace_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, limiter, options = _setup()
    driver = Driver()
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    with caplog.at_level(logging.DEBUG, logger="apf_limiter"):
        await clock.advance(4.99)
        assert not task.done() and limiter.statistics().executing_requests == 1
        await clock.advance(0.01)
        await task
    start = driver.start()
    assert start["status"] == 408 and start["headers"]["connection"] == "close"
    assert start["headers"]["x-apf-priority-level"] == "test"
    assert b"too slowly" in driver.sent[-1]["body"]
    assert limiter.statistics().executing_requests == 0
    (record,) = [r for r in caplog.records if "body" in r.getMessage()]
    assert record.levelno == logging.INFO and "408" in record.getMessage()


async def test_a_trickling_body_is_cut_off_when_it_falls_below_the_rate() -> None:
    # 10 bytes a second against 240 B/s after a 5 s grace period: behind once
    # 50 + 0 < 240 * (t - 5), i.e. at t = 5 + 50/240 (the 6th chunk would come at t = 6).
    clock, _, options = _setup()
    driver = Driver()
    _trickle(clock, driver, 10, 1.0, 100)
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    await clock.advance(5 + 50 / 240 - 0.001)
    assert not task.done()
    await clock.advance(0.002)
    await task
    assert _status(driver) == 408 and len(app.received) == 5


async def test_a_body_at_the_rate_is_never_cut_off() -> None:
    clock, _, options = _setup(min_body_rate=100.0, body_rate_grace=1.0)
    driver = Driver()
    _trickle(clock, driver, 100, 1.0, 30)  # exactly 100 B/s, for 30 s
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    await clock.advance(31)
    await task
    assert _status(driver) == 200 and len(app.received) == 30


async def test_time_nobody_reads_does_not_count() -> None:
    # The app works for 10 s before it reads: the server does not read the socket then,
    # so the client cannot send; that time is not held against it.
    clock, _, options = _setup()
    driver = Driver(_chunk(b"x" * 1000), _chunk(b"", False))
    app = Reader(clock, pause=10.0)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    await clock.advance(11)
    await task
    assert _status(driver) == 200 and len(app.received) == 2


async def test_bytes_read_while_queued_count_from_arrival() -> None:
    # 2400 bytes read by the disconnect watcher in the first second earn 10 s at 240 B/s:
    # after the 5 s grace period, the body may stall until 15 s after arrival, queue wait
    # included, and not a moment longer.
    clock, limiter, options = _setup()
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    driver = Driver()
    clock.call_later(1.0, driver.incoming.put_nowait, _chunk(b"x" * 2400))
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(2)
    await held.__aexit__(None, None, None)  # admitted after 2 s; the app waits for the rest
    await settle(lambda: len(app.received) == 1)
    await clock.advance(12.99)
    assert not task.done()
    await clock.advance(0.01)
    await task
    assert _status(driver) == 408


async def test_a_queued_request_whose_body_stalls_leaves_its_queue_with_408() -> None:
    clock, limiter, options = _setup()
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    driver = Driver(_chunk(b"x" * 100))  # then nothing
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(_post(), driver.receive, driver.send))
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(5 + 100 / 240)
    await task
    assert app.calls == 0 and _status(driver) == 408
    level = limiter.statistics().priority_levels["test"]
    assert (level.waiting_requests, level.cancelled) == (0, 1)
    await held.__aexit__(None, None, None)


async def test_only_a_request_with_a_body_is_timed() -> None:
    clock, _, options = _setup()
    for scope, minimum, timed in [
        (http_scope(), 240.0, False),  # no Content-Length, no Transfer-Encoding
        (_post(0), 240.0, False),
        (_post(10), 240.0, True),
        (http_scope(method="POST", headers=[(b"transfer-encoding", b"chunked")]), 240.0, True),
        (http_scope(method="POST", http_version="2"), 240.0, True),  # HTTP/2: no header needed
        (_post(10), None, False),
    ]:
        driver = Driver(_chunk(b"", False))
        app = Reader(clock)
        await APFMiddleware(app, **options, min_body_rate=minimum)(
            scope, driver.receive, driver.send
        )
        if minimum is None:
            assert app.receive == driver.receive  # the server's own receive, untouched
            continue
        # The middleware's receive decides at the app's first call whether to time the body.
        wrapped = app.receive
        assert isinstance(wrapped, functools.partial) and wrapped.func is timed_receive, scope
        ticket = wrapped.args[0]
        assert (ticket.body is not None) is timed, scope


async def test_min_body_rate_none_turns_the_rate_off() -> None:
    clock, _, options = _setup(min_body_rate=None)
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(Reader(clock), **options)(_post(), driver.receive, driver.send)
    )
    await clock.advance(59.9)
    assert not task.done()  # only the request deadline (60 s) ends it
    await clock.advance(0.1)
    await task
    assert _status(driver) == 504


async def test_an_expect_100_continue_body_is_not_timed_while_queued() -> None:
    # The watcher does not read such a body while queued (the client waits for "100
    # Continue"), so its clock does not run; once admitted, the body comes at once.
    clock, limiter, options = _setup(wait_limit=30.0)
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    driver = Driver(_chunk(b"x" * 500, False))
    scope = _post(500)
    scope["headers"].append((b"expect", b"100-continue"))
    app = Reader(clock)
    task = asyncio.create_task(APFMiddleware(app, **options)(scope, driver.receive, driver.send))
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(20)
    assert driver.receive_calls == 0
    await held.__aexit__(None, None, None)
    await task
    assert _status(driver) == 200 and app.received[0]["body"] == b"x" * 500
