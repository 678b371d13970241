"""The request deadline, in fake time: 504 or an aborted response, seats back at once."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest

from apf_limiter import Admission, Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware, RouteOptions
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app, settle, websocket_scope

pytestmark = pytest.mark.timeout(60)


class Hanging:
    """An app that hangs (optionally after starting its response) until cancelled."""

    def __init__(self, *, start: bool = False, unwind: asyncio.Event | None = None) -> None:
        self.start = start
        self.unwind = unwind  # set: the app is slow to unwind from its cancellation
        self.calls = 0
        self.cancelled = False
        self.late_send: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        if self.start:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            if self.unwind is not None:
                await asyncio.shield(self.unwind.wait())
            raise


def _setup(limit: int = 1, **middleware: Any) -> tuple[FakeClock, Limiter, dict[str, Any]]:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=limit), clock=clock)
    return clock, limiter, {"limiter": limiter, **middleware}


def _status(driver: Driver) -> int | None:
    starts = [m for m in driver.sent if m["type"] == "http.response.start"]
    return starts[0]["status"] if starts else None


async def test_the_deadline_answers_504_with_the_apf_headers_and_frees_the_seat_at_once() -> None:
    clock, limiter, options = _setup()
    unwind = asyncio.Event()
    app = Hanging(unwind=unwind)
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), driver.receive, driver.send)
    )
    await clock.advance(59.9)
    assert limiter.statistics().executing_requests == 1 and driver.sent == []
    await clock.advance(0.1)
    # The app is still unwinding (slowly), but its seat went back the moment the deadline hit.
    assert app.cancelled and not task.done()
    assert limiter.statistics().executing_requests == 0
    unwind.set()
    await task
    start = driver.start()
    assert start["status"] == 504
    assert start["headers"]["x-apf-flow-schema"] == "everyone"
    assert start["headers"]["x-apf-priority-level"] == "test"
    assert start["headers"]["connection"] == "close"
    assert b"deadline" in driver.sent[-1]["body"]


async def test_a_started_response_is_aborted_and_later_sends_are_dropped() -> None:
    clock, limiter, options = _setup()
    sent_late: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # A misbehaving app that goes on sending: nothing more reaches the server.
            message: Message = {"type": "http.response.body", "body": b"late"}
            sent_late.append(message)
            await send(message)

    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), driver.receive, driver.send)
    )
    await clock.advance(60)
    await task  # no exception: the response simply ends unfinished
    assert sent_late and [m["type"] for m in driver.sent] == ["http.response.start"]
    assert limiter.statistics().executing_requests == 0


async def test_an_app_that_swallows_the_cancellation_still_gets_its_504() -> None:
    clock, _, options = _setup()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return  # swallowed: returns without answering

    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), driver.receive, driver.send)
    )
    await clock.advance(60)
    await task
    assert _status(driver) == 504
    assert task.cancelling() == 0  # our cancellation was taken back (uncancel)


async def test_a_cancellation_from_outside_wins_over_the_deadline() -> None:
    # The server cancels the request task (shutdown) in the same instant the deadline passes:
    # its cancellation must propagate, not be turned into a 504.
    clock, limiter, options = _setup()
    app = Hanging()
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), driver.receive, driver.send)
    )

    class CancelTooHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            task.cancel()  # right after the deadline's own cancel, before the task resumes

    handler = CancelTooHandler()
    logging.getLogger("apf_limiter").addHandler(handler)
    try:
        await settle(lambda: app.calls == 1)
        await clock.advance(60)
    finally:
        logging.getLogger("apf_limiter").removeHandler(handler)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert app.cancelled and driver.sent == []
    assert limiter.statistics().executing_requests == 0


async def test_the_deadline_counts_from_arrival_and_ends_a_queued_wait_with_504() -> None:
    clock, limiter, options = _setup(request_timeout=5.0)
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    queued_driver, late_driver = Driver(), Driver()
    queued_app, late_app = Hanging(), Hanging()
    middleware = APFMiddleware(queued_app, **options)
    queued = asyncio.create_task(
        middleware(http_scope(), queued_driver.receive, queued_driver.send)
    )
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(5)
    await queued
    # Never ran; left its queue (counted as cancelled, not as a 429 time-out).
    assert queued_app.calls == 0 and _status(queued_driver) == 504
    level = limiter.statistics().priority_levels["test"]
    assert (level.waiting_requests, level.cancelled, level.rejected["time-out"]) == (0, 1, 0)
    # A request that waits 3 s, then runs: cancelled 2 s into its execution (5 s from arrival).
    late = asyncio.create_task(
        APFMiddleware(late_app, **options)(http_scope(), late_driver.receive, late_driver.send)
    )
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(3)
    await held.__aexit__(None, None, None)
    await settle(lambda: late_app.calls == 1)
    await clock.advance(1.9)
    assert not late.done()
    await clock.advance(0.1)
    await late
    assert late_app.cancelled and _status(late_driver) == 504
    assert limiter.statistics().executing_requests == 0


@pytest.mark.parametrize(
    ("middleware", "route", "expected"),
    [
        ({}, None, 60.0),
        ({"request_timeout": 7}, None, 7.0),
        ({"request_timeout_by_level": {"test": 3}}, None, 3.0),
        ({"request_timeout_by_level": {"other": 3}}, None, 60.0),
        ({"request_timeout_by_level": {"test": 3}}, RouteOptions(request_timeout=2), 2.0),
        ({}, RouteOptions(request_timeout=90), 90.0),
        ({"request_timeout": 5}, RouteOptions(request_timeout=math.inf), None),
        ({"request_timeout_by_level": {"test": None}}, None, None),
        ({"request_timeout": None}, None, None),
        ({"request_timeout": None}, RouteOptions(request_timeout=4), 4.0),
        ({"request_timeout": None, "min_body_rate": None}, RouteOptions(request_timeout=4), 4.0),
        # Long-running: until its response starts (this app never starts it).
        ({}, RouteOptions(long_running=True, request_timeout=4), 4.0),
        ({}, RouteOptions(long_running=True, request_timeout=math.inf), None),
    ],
)
async def test_the_deadline_of_a_request_route_first_then_level_then_default(
    middleware: dict[str, Any], route: RouteOptions | None, expected: float | None
) -> None:
    paths = {"/": route} if route is not None else None
    clock, _, options = _setup(paths=paths, **middleware)
    app = Hanging()
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), driver.receive, driver.send)
    )
    await settle(lambda: app.calls == 1)
    if expected is None:
        await clock.advance(3600)
        assert not app.cancelled and clock.pending_timers == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return
    await clock.advance(expected - 0.001)
    assert not app.cancelled
    await clock.advance(0.001)
    await task
    assert app.cancelled


async def test_websockets_have_no_deadline() -> None:
    clock, _, options = _setup()
    accepted = asyncio.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        accepted.set()
        await asyncio.Event().wait()

    driver = Driver({"type": "websocket.connect"})
    task = asyncio.create_task(
        APFMiddleware(app, **options)(websocket_scope(), driver.receive, driver.send)
    )
    await accepted.wait()
    await clock.advance(3600)
    assert not task.done() and clock.pending_timers == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_fast_path_shares_one_timer_among_all_requests() -> None:
    # No timer (nor task) per request: one timer for the middleware, armed for the earliest
    # deadline, and a record per request that is dropped as the request ends.
    clock, limiter, options = _setup(limit=200)
    middleware = APFMiddleware(Hanging(), **options)
    drivers = [Driver() for _ in range(100)]
    tasks = []
    for i, driver in enumerate(drivers):
        tasks.append(asyncio.create_task(middleware(http_scope(), driver.receive, driver.send)))
        await clock.advance(0.1 if i % 10 == 0 else 0)
    await settle(lambda: limiter.statistics().executing_requests == 100)
    assert clock.pending_timers == 1
    other = APFMiddleware(ok_app, **options)
    for _ in range(50):  # ordinary requests come and go meanwhile
        await other(http_scope(), Driver().receive, Driver().send)
    assert clock.pending_timers == 2  # the other middleware's own timer
    await clock.advance(60)
    await asyncio.gather(*tasks)
    assert {_status(d) for d in drivers} == {504}
    assert limiter.statistics().executing_requests == 0
    await clock.advance(60)  # each timer fires once more, finds nothing due and stops
    assert clock.pending_timers == 0


async def test_each_expiry_is_logged_with_flow_schema_and_level_but_no_header_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, _, options = _setup()
    scope = http_scope("/reports", method="POST", headers=[(b"authorization", b"Bearer s3cret")])
    task = asyncio.create_task(
        APFMiddleware(Hanging(), **options)(scope, Driver().receive, Driver().send)
    )
    with caplog.at_level(logging.DEBUG, logger="apf_limiter"):
        await clock.advance(60)
        await task
    (record,) = [r for r in caplog.records if "deadline" in r.getMessage()]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "POST /reports" in message and "everyone" in message and "test" in message
    assert "504" in message and "s3cret" not in message


async def test_an_app_error_after_the_deadline_propagates() -> None:
    clock, limiter, options = _setup()
    error = RuntimeError("cleanup failed")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise error from None

    task = asyncio.create_task(
        APFMiddleware(app, **options)(http_scope(), Driver().receive, Driver().send)
    )
    await clock.advance(60)
    with pytest.raises(RuntimeError) as raised:
        await task
    assert raised.value is error and task.cancelling() == 0
    assert limiter.statistics().executing_requests == 0


async def test_the_timer_follows_the_event_loop_it_runs_in() -> None:
    # A middleware used from one loop after another (Starlette's TestClient does that) keeps
    # its deadlines: the timer of a finished loop is replaced.
    limiter = Limiter(level_config(limit=1))
    middleware = APFMiddleware(Hanging(), limiter=limiter, request_timeout=0.05)

    def one_request() -> int | None:
        driver = Driver()

        async def run() -> None:
            await middleware(http_scope(), driver.receive, driver.send)

        asyncio.run(run())
        return _status(driver)

    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, one_request) == 504
    assert await loop.run_in_executor(None, one_request) == 504


def test_deadline_options_are_validated() -> None:
    bad: Any
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError, match="request_timeout"):
            APFMiddleware(ok_app, request_timeout=bad)
        with pytest.raises(ValueError, match="request_timeout"):
            RouteOptions(request_timeout=bad)
        with pytest.raises(ValueError, match="request_timeout_by_level"):
            APFMiddleware(ok_app, request_timeout_by_level={"x": bad})
        with pytest.raises(ValueError, match="min_body_rate"):
            APFMiddleware(ok_app, min_body_rate=bad)
        with pytest.raises(ValueError, match="body_rate_grace"):
            APFMiddleware(ok_app, body_rate_grace=bad)
    # A string: refused by the check, or by the compiled build's argument types.
    with pytest.raises((ValueError, TypeError)):
        APFMiddleware(ok_app, request_timeout="60")  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        APFMiddleware(ok_app, request_timeout_by_level={"x": "60"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="max_total_body_buffer"):
        APFMiddleware(ok_app, max_total_body_buffer=-1)
    with pytest.raises((ValueError, TypeError)):
        APFMiddleware(ok_app, max_total_body_buffer=1.5)  # type: ignore[arg-type]


async def test_admission_released_by_the_deadline_is_not_released_twice() -> None:
    # The seat a deadline frees goes to the next request; the finished request's own
    # release afterwards must not free it once more.
    clock, limiter, options = _setup(request_timeout=10)
    unwind = asyncio.Event()
    first = asyncio.create_task(
        APFMiddleware(Hanging(unwind=unwind), **options)(
            http_scope(), Driver().receive, Driver().send
        )
    )
    await settle(lambda: limiter.statistics().executing_requests == 1)
    second: Admission = limiter.admit(RequestDigest(user="next"))
    waiting = asyncio.create_task(second.__aenter__())
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await clock.advance(10)
    await waiting  # the seat went on at the deadline
    unwind.set()
    await first
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats) == (1, 1)
    await second.__aexit__(None, None, None)
    assert limiter.statistics().executing_requests == 0
