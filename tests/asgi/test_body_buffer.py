"""Bodies kept while queued: the per-request and the total bound, and ``Expect: 100-continue``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apf_limiter import Admission, Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.asgi._waiting import MESSAGE_OVERHEAD, headers_say_body
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app, settle

pytestmark = pytest.mark.timeout(60)


def _chunk(size: int, more: bool = True) -> Message:
    return {"type": "http.request", "body": b"x" * size, "more_body": more}


async def _occupy(limiter: Limiter) -> Admission:
    admission = limiter.admit(RequestDigest(user="someone-else"))
    await admission.__aenter__()
    return admission


async def _read_all(scope: Scope, receive: Receive, send: Send) -> None:
    while (await receive()).get("more_body"):
        pass
    await ok_app(scope, receive, send)


def _upload(size: int = 10**6) -> Scope:
    return http_scope(method="POST", headers=[(b"content-length", str(size).encode())])


async def _quiet() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def test_one_queued_request_keeps_at_most_its_limit_plus_one_message() -> None:
    limiter = Limiter(level_config(limit=1), clock=FakeClock())
    held = await _occupy(limiter)
    driver = Driver(*[_chunk(1000) for _ in range(10)], _chunk(0, False))
    limit = 3000  # below it the watcher reads: 1256, 2512, then 3768 and it stops
    middleware = APFMiddleware(_read_all, limiter=limiter, max_body_buffer=limit)
    task = asyncio.create_task(middleware(_upload(), driver.receive, driver.send))
    await settle(lambda: driver.receive_calls == 3)
    await _quiet()
    budget = middleware._body_budget
    assert driver.receive_calls == 3
    assert budget.kept == budget.peak == 3 * (1000 + MESSAGE_OVERHEAD)
    assert budget.peak < limit + 1000 + MESSAGE_OVERHEAD
    await held.__aexit__(None, None, None)
    await task
    assert budget.kept == 0  # handed to the app: back in the budget


async def test_queued_requests_stop_reading_at_the_total_cap() -> None:
    limiter = Limiter(level_config(limit=1), clock=FakeClock())
    held = await _occupy(limiter)
    middleware = APFMiddleware(_read_all, limiter=limiter, max_total_body_buffer=3000)
    first = Driver(*[_chunk(1000) for _ in range(5)], _chunk(0, False))
    second = Driver(_chunk(10, False), {"type": "http.disconnect"})
    tasks = [asyncio.create_task(middleware(_upload(), first.receive, first.send))]
    await settle(lambda: first.receive_calls == 3)
    tasks.append(asyncio.create_task(middleware(_upload(), second.receive, second.send)))
    await settle(lambda: limiter.statistics().waiting_requests == 2)
    await _quiet()
    budget = middleware._body_budget
    # The first stopped at the cap (past it by one message); the second never read, so its
    # client's departure went unnoticed: it still waits.
    assert (first.receive_calls, second.receive_calls) == (3, 0)
    assert budget.kept == 3 * (1000 + MESSAGE_OVERHEAD)
    assert limiter.statistics().waiting_requests == 2
    await held.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    assert budget.kept == 0
    assert next(m.get("status") for m in first.sent) == 200


@pytest.mark.parametrize("ending", ["rejected", "disconnected", "cancelled", "expired"])
async def test_kept_bytes_go_back_to_the_budget_however_the_wait_ends(ending: str) -> None:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=1, wait_limit=10), clock=clock)
    held = await _occupy(limiter)
    # Only the wait limit (10 s) when rejected; else a deadline of 5 s.
    timeouts: dict[str, Any] = {"request_timeout": 5}
    if ending == "rejected":
        timeouts = {"request_timeout": None, "min_body_rate": None}
    middleware = APFMiddleware(_read_all, limiter=limiter, **timeouts)
    messages = [_chunk(500), _chunk(500)]
    if ending == "disconnected":
        messages.append({"type": "http.disconnect"})
    driver = Driver(*messages)
    task = asyncio.create_task(middleware(_upload(), driver.receive, driver.send))
    await settle(lambda: driver.receive_calls == 3)
    budget = middleware._body_budget
    assert budget.peak == 2 * (500 + MESSAGE_OVERHEAD)
    if ending in ("rejected", "expired"):
        await clock.advance(10)
    elif ending == "cancelled":
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert budget.kept == 0
    expected = {"rejected": 429, "disconnected": 499, "cancelled": None, "expired": 504}[ending]
    statuses = [m["status"] for m in driver.sent if m["type"] == "http.response.start"]
    assert statuses == ([expected] if expected else [])
    await held.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("headers", "watched"),
    [
        ([(b"expect", b"100-continue")], True),  # no body: watching costs the client nothing
        ([(b"expect", b"100-continue"), (b"content-length", b"0")], True),
        ([(b"expect", b"100-Continue"), (b"content-length", b"5")], False),
        ([(b"expect", b"foo=bar ,  100-CONTINUE"), (b"transfer-encoding", b"chunked")], False),
        ([(b"expect", b"100-continuex"), (b"content-length", b"5")], True),
        ([(b"content-length", b"5")], True),
    ],
)
async def test_expect_100_continue_stops_the_watching_only_for_a_body(
    headers: list[tuple[bytes, bytes]], watched: bool
) -> None:
    limiter = Limiter(level_config(limit=1), clock=FakeClock())
    held = await _occupy(limiter)
    calls: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope)
        await ok_app(scope, receive, send)

    driver = Driver({"type": "http.disconnect"})
    scope = http_scope(method="POST", headers=headers)
    task = asyncio.create_task(
        APFMiddleware(app, limiter=limiter)(scope, driver.receive, driver.send)
    )
    await settle(lambda: limiter.statistics().priority_levels["test"].dispatched == 1)
    await _quiet()
    # Watched: the client's departure takes the request out of its queue, unrun.
    assert (driver.receive_calls > 0) is watched
    assert limiter.statistics().waiting_requests == (0 if watched else 1)
    await held.__aexit__(None, None, None)
    await task
    assert (calls == []) is watched


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], (False, False)),
        ([(b"content-length", b"12")], (True, False)),
        ([(b"content-length", b"0")], (False, False)),
        ([(b"content-length", b"zz")], (True, False)),
        ([(b"transfer-encoding", b"chunked")], (True, False)),
        ([(b"expect", b" 100-continue ")], (False, True)),
        ([(b"expect", b"a, 100-Continue"), (b"content-length", b"3")], (True, True)),
        ([(b"expect", b"100-continue-ish")], (False, False)),
    ],
)
def test_the_body_headers_are_parsed_as_lists(
    headers: list[tuple[bytes, bytes]], expected: tuple[bool, bool]
) -> None:
    assert headers_say_body(http_scope(headers=headers)) == expected
