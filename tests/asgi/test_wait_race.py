"""A message the disconnect watcher received as the wait ended is not lost.

Under asyncio the watcher's ``receive()`` runs in a task of its own. When the client's
disconnect completed that call in the same event-loop turn in which the request was admitted,
cancelling the watcher cancelled nothing, and the ``http.disconnect`` was dropped. hypercorn
reports a disconnect once: the application ran for a client that had left, holding its seats,
and a long-running request its ``max_long_running`` place, for good. Driven here in one turn:
the disconnect is queued, then the seat frees, before any task runs.
"""

from __future__ import annotations

import asyncio

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, settle, websocket_scope

pytestmark = pytest.mark.timeout(60)


class Stream:
    """An event stream: answers at once, then streams until its client leaves."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[Message] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        if scope["type"] == "websocket":
            self.seen.append(await receive())
            await send({"type": "websocket.accept"})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        while True:
            message = await receive()
            self.seen.append(message)
            if message["type"].endswith("disconnect"):
                return


async def _quiet() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


CASES: dict[str, tuple[Scope, list[Message], Message]] = {
    "get": (http_scope(), [], {"type": "http.disconnect"}),
    "post": (
        http_scope(method="POST", headers=[(b"content-length", b"2")]),
        [{"type": "http.request", "body": b"ab", "more_body": False}],
        {"type": "http.disconnect"},
    ),
    "websocket": (
        websocket_scope(),
        [{"type": "websocket.connect"}],
        {"type": "websocket.disconnect"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_disconnect_in_the_turn_the_request_is_admitted_is_acted_on(case: str) -> None:
    scope, read_while_queued, disconnect = CASES[case]
    limiter = Limiter(level_config(limit=1), clock=FakeClock())
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    app = Stream()
    middleware = APFMiddleware(
        app, limiter=limiter, long_running=lambda scope: True, max_long_running={"*": 1}
    )
    caps = middleware._long_running_caps
    assert caps is not None
    driver = Driver(*read_while_queued)
    task = asyncio.create_task(middleware(dict(scope), driver.receive, driver.send))
    # Queued, with the watcher's receive() waiting for what comes after what it kept.
    await settle(lambda: driver.receive_calls == len(read_while_queued) + 1)
    await _quiet()
    assert limiter.statistics().waiting_requests == 1 and not task.done()
    # One turn: the client leaves, and the seat frees (which admits the request).
    driver.incoming.put_nowait(disconnect)
    held.release()
    await settle(task.done)
    await task
    # The departure was acted on: the app never ran, the seat and the place came back.
    assert app.calls == 0
    assert limiter.statistics().executing_requests == 0
    assert caps.open_requests("everyone") == 0
    if scope["type"] == "http":
        assert [m.get("status") for m in driver.sent if "status" in m] == [499]
    else:
        assert driver.sent == []
    assert middleware._body_budget.kept == 0


async def test_a_body_message_completed_as_the_wait_ended_reaches_the_app() -> None:
    # The last body chunk arrives in the turn the request is admitted: the app reads it.
    limiter = Limiter(level_config(limit=1), clock=FakeClock())
    held = limiter.admit(RequestDigest(user="someone-else"))
    await held.__aenter__()
    received: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            received.append(message)
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = APFMiddleware(app, limiter=limiter)
    driver = Driver({"type": "http.request", "body": b"a", "more_body": True})
    scope = http_scope(method="POST", headers=[(b"content-length", b"2")])
    task = asyncio.create_task(middleware(scope, driver.receive, driver.send))
    await settle(lambda: driver.receive_calls == 2)
    await _quiet()
    driver.incoming.put_nowait({"type": "http.request", "body": b"b", "more_body": False})
    held.release()
    await settle(task.done)
    await task
    assert [m["body"] for m in received] == [b"a", b"b"]
    assert driver.sent[0]["status"] == 200
    assert middleware._body_budget.kept == 0
