"""The middleware's queued path under trio: waiting, body replay and disconnects."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import http_scope, ok_app

pytestmark = pytest.mark.timeout(60)


def test_queued_requests_under_trio_replay_their_body_and_leave_on_disconnect() -> None:
    async def main() -> None:
        limiter = Limiter(level_config(limit=1), clock=FakeClock())
        received: list[Message] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            received.append(await receive())
            await ok_app(scope, receive, send)

        middleware = APFMiddleware(app, limiter=limiter)
        to_app, from_server = trio.open_memory_channel[Message](10)
        to_lost, from_lost = trio.open_memory_channel[Message](10)
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        held = limiter.admit(RequestDigest(user="someone-else"))
        await held.__aenter__()
        body: Message = {"type": "http.request", "body": b"payload", "more_body": False}
        await to_app.send(body)
        await to_lost.send({"type": "http.disconnect"})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(middleware, http_scope(), from_server.receive, send)
            nursery.start_soon(middleware, http_scope(), from_lost.receive, send)
            await trio.testing.wait_all_tasks_blocked()
            stats = limiter.statistics().priority_levels["test"]
            assert (stats.waiting_requests, stats.cancelled) == (1, 1)
            await held.__aexit__(None, None, None)
        assert received == [body]
        # The departed client's 499 (dropped by a real server), then the admitted one's 200.
        assert [(m["type"], m.get("status")) for m in sent] == [
            ("http.response.start", 499),
            ("http.response.body", None),
            ("http.response.start", 200),
            ("http.response.body", None),
        ]
        assert limiter.statistics().executing_requests == 0

    trio.run(main)


class _LossyTrioReceive:
    """A ``receive`` that is not cancel-safe (like one built on an async generator): a call
    cancelled mid-way loses the chunk it had taken."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.arrived = trio.Event()
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        if not self.chunks:
            await trio.sleep_forever()  # only a disconnect could come now
        chunk = self.chunks.pop(0)
        if self.calls > 1:
            await self.arrived.wait()  # the next chunk is still on the wire
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}


def test_under_trio_a_body_chunk_in_flight_at_dispatch_is_not_lost() -> None:
    # Issue 28, item 9: the watcher's receive() in flight was cancelled when the wait ended
    # (a task cannot outlive its nursery), and a lossy receive dropped the chunk it held.
    async def main() -> None:
        limiter = Limiter(level_config(limit=1), clock=FakeClock())
        received: list[Message] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            received.append(await receive())
            received.append(await receive())
            await ok_app(scope, receive, send)

        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        receive = _LossyTrioReceive([b"first", b"second", b"third"])
        held = limiter.admit(RequestDigest(user="someone-else"))
        await held.__aenter__()
        middleware = APFMiddleware(app, limiter=limiter)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(middleware, http_scope(method="POST"), receive, send)
                await trio.testing.wait_all_tasks_blocked()
                assert receive.calls == 2  # "first" kept, "second" in flight
                await held.__aexit__(None, None, None)  # dispatched with the body coming
                await trio.testing.wait_all_tasks_blocked()
                receive.arrived.set()
        assert [m["body"] for m in received] == [b"first", b"second"]
        assert received[1]["more_body"] is True
        assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [200]
        assert limiter.statistics().executing_requests == 0

    trio.run(main)
