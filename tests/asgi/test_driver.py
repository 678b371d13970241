"""The middleware under a hand-rolled ASGI server: lifespan, receive(), disconnects, seats."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from apf_limiter import Admission, Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware, WorkEstimate
from apf_limiter.asgi._types import ASGIApp, Message, Receive, Scope, Send
from apf_limiter.asgi._waiting import MESSAGE_OVERHEAD
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app, settle, websocket_scope

pytestmark = pytest.mark.timeout(60)


def _limiter(**kwargs: Any) -> Limiter:
    return Limiter(level_config(**kwargs), clock=FakeClock())


async def _occupy(limiter: Limiter) -> Admission:
    """Take the level's only seat (as another request would)."""
    admission = limiter.admit(RequestDigest(user="someone-else"))
    await admission.__aenter__()
    return admission


def _body(data: bytes, more: bool) -> Message:
    return {"type": "http.request", "body": data, "more_body": more}


class RecordingApp:
    """Reads ``reads`` messages, records them, then answers 200."""

    def __init__(self, reads: int) -> None:
        self.reads = reads
        self.received: list[Message] = []
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        for _ in range(self.reads):
            self.received.append(await receive())
        await ok_app(scope, receive, send)


async def test_lifespan_messages_pass_through_unchanged_and_shutdown_closes_the_limiter() -> None:
    received: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        for reply in ("lifespan.startup.complete", "lifespan.shutdown.complete"):
            received.append(await receive())
            await send({"type": reply})

    startup, shutdown = {"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}
    middleware = APFMiddleware(app, config=level_config(limit=1))
    assert not middleware.limiter.closed
    driver = Driver(startup, shutdown)
    scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    await middleware(scope, driver.receive, driver.send)
    assert received[0] is startup and received[1] is shutdown
    assert [m["type"] for m in driver.sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    assert middleware.limiter.closed
    assert scope == {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}


async def test_lifespan_of_a_given_limiter_leaves_it_open_and_errors_propagate_unchanged() -> None:
    error = RuntimeError("no lifespan here")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise error

    limiter = _limiter(limit=1)
    driver = Driver({"type": "lifespan.startup"})
    with pytest.raises(RuntimeError) as raised:
        await APFMiddleware(app, limiter=limiter)({"type": "lifespan"}, driver.receive, driver.send)
    assert raised.value is error
    assert not limiter.closed


async def test_free_seats_admit_in_one_step_without_touching_receive() -> None:
    limiter = _limiter(limit=1)
    middleware = APFMiddleware(ok_app, limiter=limiter)
    driver = Driver()
    call = middleware(http_scope("/fast"), driver.receive, driver.send)
    with pytest.raises(StopIteration):
        call.send(None)  # no event-loop round trip: the whole request ran in one step
    assert driver.receive_calls == 0
    assert [m["type"] for m in driver.sent] == ["http.response.start", "http.response.body"]
    assert limiter.statistics().executing_requests == 0


async def test_body_read_while_queued_is_replayed_in_order_and_nothing_else_is_consumed() -> None:
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    chunks = [_body(b"a" * 10, True), _body(b"b" * 10, True), _body(b"c" * 10, False)]
    driver = Driver(*chunks)
    app = RecordingApp(reads=4)
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(http_scope(), driver.receive, driver.send)
    )
    # The watcher read the whole body and now waits for a disconnect.
    await settle(lambda: driver.receive_calls == 4)
    assert app.calls == 0 and limiter.statistics().waiting_requests == 1
    await held.__aexit__(None, None, None)
    await settle(lambda: len(app.received) == 3)
    # The watcher's pending receive() was cancelled, not answered: the next message is the app's.
    later: Message = {"type": "http.disconnect"}
    driver.incoming.put_nowait(later)
    await task
    assert all(a is b for a, b in zip(app.received[:3], chunks, strict=True))
    assert app.received[3] is later
    assert limiter.statistics().executing_requests == 0


async def test_watching_stops_at_the_buffer_bound_and_the_rest_reaches_the_app() -> None:
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    chunks = [_body(b"a" * 10, True), _body(b"b" * 10, True), _body(b"c" * 10, False)]
    driver = Driver(*chunks)
    app = RecordingApp(reads=3)
    # Two messages of 10 bytes, each charged MESSAGE_OVERHEAD too, reach the bound.
    bound = 2 * (10 + MESSAGE_OVERHEAD) - 1
    middleware = APFMiddleware(app, limiter=limiter, max_body_buffer=bound)
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await settle(lambda: driver.receive_calls == 2)
    for _ in range(20):
        await asyncio.sleep(0)
    assert driver.receive_calls == 2  # the bound is reached: no more reading
    # Past the bound a disconnect goes unnoticed while queued.
    driver.incoming.put_nowait({"type": "http.disconnect"})
    for _ in range(20):
        await asyncio.sleep(0)
    assert limiter.statistics().waiting_requests == 1
    await held.__aexit__(None, None, None)
    await task
    assert app.received == chunks
    assert driver.incoming.get_nowait() == {"type": "http.disconnect"}


@pytest.mark.parametrize("kind", ["http", "websocket"])
async def test_disconnect_while_queued_leaves_the_queue_and_never_calls_the_app(kind: str) -> None:
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    if kind == "http":
        scope, messages = http_scope(), [_body(b"x", False), {"type": "http.disconnect"}]
    else:
        scope = websocket_scope()
        messages = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1001}]
    driver = Driver(*messages)
    app = RecordingApp(reads=0)
    await APFMiddleware(app, limiter=limiter)(scope, driver.receive, driver.send)
    assert app.calls == 0
    if kind == "http":
        # A 499 ("client closed request") for the middleware outside (the server drops it).
        start = driver.start()
        assert start["status"] == 499 and start["headers"]["content-length"] == "0"
        assert start["headers"]["x-apf-priority-level"] == "test"
        assert driver.sent[-1] == {"type": "http.response.body", "body": b""}
    else:
        assert driver.sent == []
    stats = limiter.statistics().priority_levels["test"]
    assert (stats.waiting_requests, stats.cancelled, stats.dispatched) == (0, 1, 1)
    await held.__aexit__(None, None, None)
    assert limiter.statistics().executing_requests == 0


async def test_rejected_websocket_without_denial_extension_is_closed_with_1013() -> None:
    limiter = _limiter(limit=1, reject=True)
    held = await _occupy(limiter)
    driver = Driver({"type": "websocket.connect"})
    app = RecordingApp(reads=0)
    await APFMiddleware(app, limiter=limiter)(websocket_scope(), driver.receive, driver.send)
    assert app.calls == 0
    assert driver.sent == [{"type": "websocket.close", "code": 1013, "reason": ""}]
    await held.__aexit__(None, None, None)


async def test_ordinary_response_holds_its_seats_until_the_last_body_message() -> None:
    limiter = _limiter(limit=4)
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(limiter.statistics().executing_requests)
        await send({"type": "http.response.body", "body": b"1", "more_body": True})
        seen.append(limiter.statistics().executing_requests)
        await send({"type": "http.response.body", "body": b"2"})
        seen.append(limiter.statistics().executing_requests)

    driver = Driver()
    await APFMiddleware(app, limiter=limiter)(http_scope(), driver.receive, driver.send)
    assert seen == [1, 1, 0]


async def test_long_running_request_releases_at_response_start() -> None:
    limiter = _limiter(limit=4)
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(limiter.statistics().executing_requests)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(limiter.statistics().executing_requests)
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})

    middleware = APFMiddleware(app, limiter=limiter, long_running=lambda scope: True)
    await middleware(http_scope("/events"), Driver().receive, Driver().send)
    assert seen == [1, 0]
    assert limiter.statistics().priority_levels["test"].dispatched == 1


@pytest.mark.parametrize("error", [ValueError("bad"), asyncio.CancelledError()])
async def test_app_exception_or_cancellation_propagates_unchanged_and_releases(
    error: BaseException,
) -> None:
    limiter = _limiter(limit=1)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert limiter.statistics().executing_requests == 1
        raise error

    driver = Driver()
    with pytest.raises(type(error)) as raised:
        await APFMiddleware(app, limiter=limiter)(http_scope(), driver.receive, driver.send)
    assert raised.value is error
    assert limiter.statistics().executing_requests == 0


async def _queued_request(limiter: Limiter, app: ASGIApp) -> asyncio.Task[None]:
    """A request through the middleware, running as a task, once it waits in a queue."""
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(http_scope(), driver.receive, driver.send)
    )
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    return task


async def test_cancelled_while_queued_leaves_the_queue() -> None:
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    app = RecordingApp(reads=0)
    task = await _queued_request(limiter, app)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.statistics().waiting_requests == 0 and app.calls == 0
    await held.__aexit__(None, None, None)


@pytest.mark.parametrize("loop_passes", [0, 1, 2, 3])
async def test_cancelled_in_the_instant_after_dispatch_gives_the_seats_back(
    loop_passes: int,
) -> None:
    # The request's seats come, then its task is cancelled (an outer timeout, say) while the
    # disconnect watcher is still winding down: the seats must go back, not leak.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    task = await _queued_request(limiter, RecordingApp(reads=0))
    await held.__aexit__(None, None, None)  # the seat goes to the queued request
    for _ in range(loop_passes):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats, level.waiting_requests) == (0, 0, 0)


async def test_queued_request_that_hits_its_wait_limit_gets_429() -> None:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=1, wait_limit=2.0), clock=clock)
    held = await _occupy(limiter)
    driver = Driver(_body(b"abc", False))
    app = RecordingApp(reads=0)
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(http_scope(), driver.receive, driver.send)
    )
    await settle(lambda: driver.receive_calls == 2)
    await clock.advance(2.0)
    await task
    assert app.calls == 0
    assert driver.start()["status"] == 429
    assert limiter.statistics().priority_levels["test"].rejected["time-out"] == 1
    await held.__aexit__(None, None, None)


async def test_seats_go_back_when_the_app_hands_over_its_last_body_message() -> None:
    limiter = _limiter(limit=1)
    middleware = APFMiddleware(ok_app, limiter=limiter)
    written = asyncio.Event()
    executing_during_writes: list[tuple[str, int]] = []

    async def slow_send(message: Message) -> None:
        # A server still writing to a slow client: the seat is no longer needed for that.
        executing_during_writes.append((message["type"], limiter.statistics().executing_requests))
        if message["type"] == "http.response.body":
            await written.wait()

    task = asyncio.create_task(middleware(http_scope(), Driver().receive, slow_send))
    await settle(lambda: len(executing_during_writes) == 2)
    assert executing_during_writes == [("http.response.start", 1), ("http.response.body", 0)]
    assert not task.done()
    written.set()
    await task
    assert limiter.statistics().executing_requests == 0


async def test_a_streaming_body_keeps_its_seats_until_the_last_chunk() -> None:
    limiter = _limiter(limit=1)

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"b", "more_body": False})

    seen: list[int] = []

    async def record(message: Message) -> None:
        seen.append(limiter.statistics().executing_requests)

    await APFMiddleware(streaming, limiter=limiter)(http_scope(), Driver().receive, record)
    assert seen == [1, 1, 0]


class _LossyReceive:
    """A ``receive`` that is not cancel-safe, like one built on an async generator (httpx's
    in-process transport): a cancelled call loses the chunk it had taken."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.arrived = asyncio.Event()
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        if not self.chunks:
            await asyncio.Event().wait()  # only a disconnect could come now
        chunk = self.chunks.pop(0)
        if self.calls > 1:
            await self.arrived.wait()  # the next chunk is still on the wire
        return _body(chunk, bool(self.chunks))


async def test_a_body_chunk_in_flight_at_dispatch_is_not_lost() -> None:
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    receive = _LossyReceive([b"first", b"second", b"third"])
    app = RecordingApp(reads=2)
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(http_scope(method="POST"), receive, driver.send)
    )
    await settle(lambda: receive.calls == 2)  # "first" kept, "second" in flight
    await held.__aexit__(None, None, None)  # dispatched now, with the body still coming
    for _ in range(10):
        await asyncio.sleep(0)
    receive.arrived.set()
    await asyncio.wait_for(task, 5)
    assert [m["body"] for m in app.received] == [b"first", b"second"]
    assert app.received[1]["more_body"] is True  # the app went on to read "third" itself
    assert limiter.statistics().executing_requests == 0


async def test_empty_body_messages_count_against_the_buffer() -> None:
    # The bound is on memory: a flood of empty (or one-byte) messages is bounded too.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    driver = Driver(*[_body(b"", True) for _ in range(1000)], _body(b"", False))
    app = RecordingApp(reads=0)
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter, max_body_buffer=4096)(
            http_scope(method="POST"), driver.receive, driver.send
        )
    )
    for _ in range(50):
        await asyncio.sleep(0)
    assert 1 <= driver.receive_calls <= 4096 // 256 + 1
    await held.__aexit__(None, None, None)
    await task
    assert limiter.statistics().executing_requests == 0


async def test_expect_100_continue_is_not_answered_while_queued() -> None:
    # The server sends "100 Continue" at the first receive(): a queued request must not make
    # the client upload a body it may then be refused (a 429 after its wait).
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    driver = Driver(_body(b"payload", False))
    app = RecordingApp(reads=1)
    scope = http_scope(
        method="POST", headers=[(b"expect", b"100-continue"), (b"content-length", b"7")]
    )
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(scope, driver.receive, driver.send)
    )
    for _ in range(20):
        await asyncio.sleep(0)
    assert limiter.statistics().waiting_requests == 1 and driver.receive_calls == 0
    await held.__aexit__(None, None, None)
    await task
    assert [m["body"] for m in app.received] == [b"payload"]


async def test_a_client_gone_while_queued_ends_cleanly_under_base_http_middleware() -> None:
    # The docs' access-log pattern: Starlette's BaseHTTPMiddleware raised "No response
    # returned." (a 500 and a traceback) when APF answered nothing for a departed client.
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    statuses: list[int] = []

    async def access_log(request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        statuses.append(response.status_code)
        return response

    async def endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    limiter = _limiter(limit=1)
    app = Starlette(
        routes=[Route("/", endpoint)],
        middleware=[
            Middleware(BaseHTTPMiddleware, dispatch=access_log),
            Middleware(APFMiddleware, limiter=limiter),
        ],
    )
    held = await _occupy(limiter)
    driver = Driver(_body(b"", False), {"type": "http.disconnect"})
    await app(http_scope(), driver.receive, driver.send)  # raised RuntimeError before
    assert statuses == [499]
    await held.__aexit__(None, None, None)
    assert limiter.statistics().executing_requests == 0


@pytest.mark.parametrize("error", [ConnectionResetError, RuntimeError])
async def test_a_server_that_refuses_sends_after_a_disconnect_is_fine(
    error: type[Exception],
) -> None:
    # ASGI 2.4 lets a server raise an OSError for a send on a closed connection; some raise
    # other errors.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    driver = Driver(_body(b"", False), {"type": "http.disconnect"})

    async def closed(message: Message) -> None:
        raise error("the client is gone")

    await APFMiddleware(ok_app, limiter=limiter)(http_scope(), driver.receive, closed)
    assert limiter.statistics().waiting_requests == 0
    await held.__aexit__(None, None, None)
    assert limiter.statistics().executing_requests == 0


async def test_the_app_starts_at_once_though_a_body_chunk_is_due() -> None:
    # A client that sends its headers and stalls must not pin the seat before the app runs:
    # the app starts, may answer without reading the body, and the receive() left in flight
    # is cancelled once the app is done.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    cancelled = asyncio.Event()
    calls = 0

    async def receive() -> Message:
        nonlocal calls
        calls += 1
        if calls == 1:
            return _body(b"part", True)
        try:
            await asyncio.Event().wait()  # the rest of the body never comes
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    app = RecordingApp(reads=0)  # answers without reading the body
    driver = Driver()
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(http_scope(method="POST"), receive, driver.send)
    )
    await settle(lambda: calls == 2)
    await held.__aexit__(None, None, None)
    await asyncio.wait_for(task, 5)
    assert app.calls == 1 and driver.start()["status"] == 200
    assert limiter.statistics().executing_requests == 0
    await asyncio.wait_for(cancelled.wait(), 5)


class _Turns:
    """Counts event-loop turns: a callback that re-schedules itself once per turn."""

    def __init__(self) -> None:
        self.count = 0
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self.count = 0
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def _semaphore_turns() -> int:
    """Turns from a release to the waiter's work under ``asyncio.Semaphore`` (the baseline)."""
    turns, semaphore = _Turns(), asyncio.Semaphore(1)
    await semaphore.acquire()

    async def waiter() -> int:
        async with semaphore:
            return turns.count

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    turns.start()
    semaphore.release()
    try:
        return await task
    finally:
        turns.stop()


@pytest.mark.parametrize("messages", [(), (_body(b"abc", False),)], ids=["no-body", "body"])
async def test_a_queued_request_runs_in_the_turn_after_its_seats_come(
    messages: tuple[Message, ...],
) -> None:
    # Under overload every request is handed its seats by another's release: each turn the
    # hand-off takes beyond asyncio.Semaphore's is a seat idle for a whole loop turn (a long
    # one, at 10x overload). The helper watching receive() is cancelled, not waited for.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)
    turns = _Turns()
    started: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        started.append(turns.count)
        if messages:
            assert await receive() == messages[0]  # replayed: kept while it waited
        await ok_app(scope, receive, send)

    driver = Driver(*messages)
    middleware = APFMiddleware(app, limiter=limiter)
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    for _ in range(3):
        await asyncio.sleep(0)  # the helper has read what there is to read
    turns.start()
    await held.__aexit__(None, None, None)
    await task
    turns.stop()
    assert started == [await _semaphore_turns()]
    assert driver.start()["status"] == 200
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.waiting_requests) == (0, 0)


async def test_a_request_cancelled_as_it_is_admitted_holds_no_latency() -> None:
    # Cancelled from outside (a server shutdown, an outer timeout) at the instant of dispatch:
    # the app never ran, so its additional latency is not held.
    limiter = _limiter(limit=1)
    held = await _occupy(limiter)

    def estimate(scope: Scope) -> WorkEstimate:
        return WorkEstimate(seats=1, final_seats=1, additional_latency=10.0)

    app = RecordingApp(reads=0)
    driver = Driver(_body(b"", False))
    middleware = APFMiddleware(app, limiter=limiter, estimate=estimate)
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await settle(lambda: limiter.statistics().waiting_requests == 1)
    await held.__aexit__(None, None, None)  # dispatched ...
    task.cancel()  # ... and cancelled in the same turn, before the wait could return
    with pytest.raises(asyncio.CancelledError):
        await task
    assert app.calls == 0
    level = limiter.statistics().priority_levels["test"]
    assert (level.executing_requests, level.executing_seats) == (0, 0)
