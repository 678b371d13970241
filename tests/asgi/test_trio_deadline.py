"""The request deadline and the minimum body rate under trio (a cancel scope per request)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import http_scope

pytestmark = pytest.mark.timeout(60)


class Server:
    """A trio-flavoured hand-rolled server: ``receive`` reads a channel, ``send`` records."""

    def __init__(self) -> None:
        self.to_app, self.incoming = trio.open_memory_channel[Message](100)
        self.sent: list[Message] = []
        self.receive_calls = 0

    async def receive(self) -> Message:
        self.receive_calls += 1
        return await self.incoming.receive()

    async def send(self, message: Message) -> None:
        await trio.lowlevel.checkpoint()  # as a real server's send may
        self.sent.append(message)

    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None


def _run(test: Callable[[FakeClock, Limiter], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = FakeClock()
        await test(clock, Limiter(level_config(limit=1), clock=clock))

    trio.run(main)


def test_an_executing_request_gets_504_and_its_seat_back_at_once_under_trio() -> None:
    async def test(clock: FakeClock, limiter: Limiter) -> None:
        unwound = trio.Event()
        cancelled: list[bool] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(True)
                with trio.CancelScope(shield=True):
                    await unwound.wait()  # slow to unwind: the seat must not wait for it
                raise

        server = Server()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                APFMiddleware(app, limiter=limiter), http_scope(), server.receive, server.send
            )
            await trio.testing.wait_all_tasks_blocked()
            await clock.advance(60)
            assert cancelled and limiter.statistics().executing_requests == 0
            unwound.set()
        assert server.status() == 504

    _run(test)


def test_a_queued_request_leaves_its_queue_with_504_under_trio() -> None:
    async def test(clock: FakeClock, limiter: Limiter) -> None:
        held = limiter.admit(RequestDigest(user="someone-else"))
        await held.__aenter__()
        calls: list[Scope] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            calls.append(scope)

        server = Server()
        middleware = APFMiddleware(app, limiter=limiter, request_timeout=5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(middleware, http_scope(), server.receive, server.send)
            await trio.testing.wait_all_tasks_blocked()
            assert limiter.statistics().waiting_requests == 1
            await clock.advance(5)
        assert calls == [] and server.status() == 504
        level = limiter.statistics().priority_levels["test"]
        assert (level.waiting_requests, level.cancelled) == (0, 1)
        await held.__aexit__(None, None, None)
        assert limiter.statistics().executing_requests == 0

    _run(test)


def test_a_stalled_body_gets_408_and_a_started_response_is_aborted_under_trio() -> None:
    async def test(clock: FakeClock, limiter: Limiter) -> None:
        async def reader(scope: Scope, receive: Receive, send: Send) -> None:
            while (await receive()).get("more_body"):
                pass

        async def streamer(scope: Scope, receive: Receive, send: Send) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await trio.sleep_forever()

        upload = http_scope("/up", method="POST", headers=[(b"content-length", b"99")])
        stalled, streaming = Server(), Server()
        await stalled.to_app.send({"type": "http.request", "body": b"x", "more_body": True})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                APFMiddleware(reader, limiter=limiter), upload, stalled.receive, stalled.send
            )
            await clock.advance(5 + 1 / 240)
        assert stalled.status() == 408
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                APFMiddleware(streamer, limiter=limiter),
                http_scope(),
                streaming.receive,
                streaming.send,
            )
            await clock.advance(60)
        assert [m["type"] for m in streaming.sent] == ["http.response.start"]
        assert limiter.statistics().executing_requests == 0

    _run(test)


def test_an_outer_cancellation_wins_over_the_deadline_under_trio() -> None:
    async def test(clock: FakeClock, limiter: Limiter) -> None:
        server = Server()
        outer = trio.CancelScope()

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await trio.sleep_forever()

        async def request() -> None:
            with outer:
                await APFMiddleware(app, limiter=limiter)(http_scope(), server.receive, server.send)

        class CancelTooHandler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer.cancel()  # the server gives up in the very instant of the deadline

        handler = CancelTooHandler()
        logging.getLogger("apf_limiter").addHandler(handler)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(request)
                await trio.testing.wait_all_tasks_blocked()
                await clock.advance(60)
        finally:
            logging.getLogger("apf_limiter").removeHandler(handler)
        assert outer.cancelled_caught and server.sent == []
        assert limiter.statistics().executing_requests == 0

    _run(test)


def test_a_queued_request_whose_body_stalls_gets_408_under_trio() -> None:
    async def test(clock: FakeClock, limiter: Limiter) -> None:
        held = limiter.admit(RequestDigest(user="someone-else"))
        await held.__aenter__()
        calls: list[Scope] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            calls.append(scope)

        upload = http_scope("/up", method="POST", headers=[(b"content-length", b"9999")])
        server = Server()
        await server.to_app.send({"type": "http.request", "body": b"x" * 240, "more_body": True})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                APFMiddleware(app, limiter=limiter), upload, server.receive, server.send
            )
            await trio.testing.wait_all_tasks_blocked()
            assert limiter.statistics().waiting_requests == 1
            await clock.advance(5.999)  # 240 bytes buy 1 s past the 5 s grace period
            assert server.sent == []
            await clock.advance(0.001)
        assert calls == [] and server.status() == 408
        level = limiter.statistics().priority_levels["test"]
        assert (level.waiting_requests, level.cancelled) == (0, 1)
        await held.__aexit__(None, None, None)

    _run(test)
