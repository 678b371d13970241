"""Shadow mode through the middleware: requests run at once; ``shadow_header`` tells the rest."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from apf_limiter import Limiter, ShadowOutcome
from apf_limiter.asgi import APFMiddleware, RouteOptions
from apf_limiter.asgi._shadow import shadow_value
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import Probe, make_app
from tests.asgi.driver import Driver, http_scope, settle
from tests.asgi.server import serve, wait_until
from tests.helpers import limited_level

pytestmark = pytest.mark.timeout(60)

HEADER = "x-apf-shadow"


def _config(enforcement: str = "Shadow") -> dict[str, Any]:
    """Level ``shadowed`` (1 seat, 1 queue of 1) for every path but ``/fast``; ``strict``
    (enforced whatever ``enforcement`` says) for ``/fast``."""

    def schema(name: str, level: str, precedence: int, urls: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": urls}],
                }
            ],
        }

    return {
        "serverConcurrencyLimit": 2,
        "requestWaitLimit": 15.0,
        "enforcement": enforcement,
        "priorityLevelEnforcement": {"strict": "Enforce"},
        "priorityLevels": [
            limited_level("shadowed", 10000, queues=1, hand_size=1, queue_length_limit=1),
            limited_level("strict", 10000, queues=1, hand_size=1, queue_length_limit=1),
        ],
        "flowSchemas": [
            schema("strict", "strict", 10, ["/fast"]),
            schema("rest", "shadowed", 100, ["*"]),
        ],
    }


class _Gated:
    """An app whose requests each wait for the gate named by their path, then answer 200."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.entered: list[str] = []

    def gate(self, path: str) -> asyncio.Event:
        return self.gates.setdefault(path, asyncio.Event())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.entered.append(scope["path"])
        await self.gate(scope["path"]).wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _start(
    middleware: APFMiddleware, app: _Gated, path: str
) -> tuple[Driver, asyncio.Task[None]]:
    driver = Driver()
    task = asyncio.create_task(middleware(http_scope(path), driver.receive, driver.send))
    await settle(lambda: path in app.entered)  # running already: shadow mode never holds
    return driver, task


async def _finish(app: _Gated, path: str, driver: Driver, task: asyncio.Task[None]) -> Any:
    app.gate(path).set()
    await task
    start = driver.start()
    assert start["status"] == 200
    return start["headers"].get(HEADER)


async def test_the_header_tells_the_would_be_outcome_as_the_response_starts() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    app = _Gated()
    middleware = APFMiddleware(app, limiter=limiter, shadow_header="X-APF-Shadow")
    first = await _start(middleware, app, "/a")  # would run at once
    second = await _start(middleware, app, "/b")  # would wait behind the first
    third = await _start(middleware, app, "/c")  # would find the queue full
    rejected = await _finish(app, "/c", *third)
    assert re.fullmatch(r"rejected=queue-full; retry-after=\d+", rejected)
    await clock.advance(1.0)
    # Its twin still waits: the header says since when (enforced, it would wait at least 1 s).
    assert await _finish(app, "/b", *second) == "pending; waited=1"
    await clock.advance(1.0)
    assert await _finish(app, "/a", *first) == "wait=0"
    # /b's twin now runs for /b's own time, 1 s. A request that comes meanwhile is pending
    # when admitted; its outcome is decided before its response starts, and the header says so.
    fourth = await _start(middleware, app, "/d")
    assert _shadowed(limiter).waiting_requests == 1
    await clock.advance(1.0)
    assert await _finish(app, "/d", *fourth) == "wait=1"
    assert _shadowed(limiter).rejected["queue-full"] == 1  # the twins' rejections
    assert _shadowed(limiter).dispatched == 3  # /a, /b and /d; /c was rejected


def _shadowed(limiter: Limiter) -> Any:
    return limiter.statistics().priority_levels["shadowed"]


async def test_no_header_by_default_nor_at_enforced_levels() -> None:
    for header, path in ((None, "/a"), ("X-APF-Shadow", "/fast")):
        app = _Gated()
        app.gate(path).set()
        driver = Driver()
        middleware = APFMiddleware(app, limiter=Limiter(_config()), shadow_header=header)
        await middleware(http_scope(path), driver.receive, driver.send)
        headers = driver.start()["headers"]
        assert HEADER not in headers
        assert headers["x-apf-priority-level"] == ("strict" if path == "/fast" else "shadowed")


async def test_a_request_past_its_deadline_gets_the_header_on_its_504() -> None:
    clock = FakeClock()
    app = _Gated()
    middleware = APFMiddleware(
        app,
        limiter=Limiter(_config(), clock=clock),
        shadow_header="X-APF-Shadow",
        request_timeout=None,
        paths={"/b": RouteOptions(request_timeout=1.0)},
    )
    first = await _start(middleware, app, "/a")
    driver, task = await _start(middleware, app, "/b")
    await clock.advance(1.0)
    await task
    start = driver.start()
    assert start["status"] == 504
    assert start["headers"][HEADER] == "pending"  # the first still holds the seat
    assert await _finish(app, "/a", *first) == "wait=0"


@pytest.mark.parametrize(
    ("outcome", "value"),
    [
        (ShadowOutcome(True, 0.0), "wait=0"),
        (ShadowOutcome(True, 0.125), "wait=0.125"),
        (ShadowOutcome(True, 12.0), "wait=12"),
        (ShadowOutcome(True, 0.0000031), "wait=0.000003"),  # a real wait never shows as 0
        (ShadowOutcome(False), "pending"),
        (ShadowOutcome(True, None, "time-out", 2), "rejected=time-out; retry-after=2"),
        (
            ShadowOutcome(True, None, "concurrency-limit", 1),
            "rejected=concurrency-limit; retry-after=1",
        ),
        (ShadowOutcome(False, None, "dropped"), "dropped"),
    ],
)
def test_header_values(outcome: ShadowOutcome, value: str) -> None:
    assert shadow_value(outcome) == value


def test_a_pending_value_tells_how_long_the_twin_has_waited() -> None:
    assert shadow_value(ShadowOutcome(False), 0.25) == "pending; waited=0.25"
    # Decided outcomes say what was decided, whatever the time since admission.
    assert shadow_value(ShadowOutcome(True, 0.125), 3.0) == "wait=0.125"
    assert shadow_value(ShadowOutcome(False, None, "dropped"), 3.0) == "dropped"


def test_an_invalid_shadow_header_name_is_refused() -> None:
    with pytest.raises(ValueError, match="header name"):
        APFMiddleware(_Gated(), config=_config(), shadow_header="X APF")


async def test_under_uvicorn_nothing_is_rejected_and_the_header_shows_what_would_be() -> None:
    limiter = Limiter(_config())
    probe = Probe()
    app = make_app("starlette", probe, limiter=limiter, shadow_header="X-APF-Shadow")

    def held(*gates: str) -> bool:
        return all(f"/hold?{gate}" in probe.entered for gate in gates)

    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        # Three at once on a level of one seat and a queue of one: all three run.
        a, b, c = (
            asyncio.create_task(client.get("/hold", params={"gate": gate})) for gate in "abc"
        )
        await wait_until(lambda: held("a", "b", "c"))
        probe.open("c")
        answered_c = await c
        probe.open("b")
        answered_b = await b
        probe.open("a")
        answered_a = await a
        assert [r.status_code for r in (answered_a, answered_b, answered_c)] == [200] * 3
        assert answered_a.headers[HEADER] == "wait=0"
        # The first still held the seat: enforced, the second would still be waiting.
        assert re.fullmatch(r"pending; waited=[0-9.]+", answered_b.headers[HEADER])
        assert re.fullmatch(r"rejected=queue-full; retry-after=\d+", answered_c.headers[HEADER])
        # Once /b's twin has run its course, two more: the second would have waited.
        await wait_until(lambda: _shadowed(limiter).executing_requests == 0)
        d = asyncio.create_task(client.get("/hold", params={"gate": "d"}))
        await wait_until(lambda: held("d"))
        e = asyncio.create_task(client.get("/hold", params={"gate": "e"}))
        await wait_until(lambda: held("e"))
        await asyncio.sleep(0.05)
        probe.open("d")
        answered_d = await d
        await wait_until(lambda: _shadowed(limiter).waiting_requests == 0)
        probe.open("e")
        answered_e = await e
        assert answered_d.headers[HEADER] == "wait=0"
        waited = float(answered_e.headers[HEADER].removeprefix("wait="))
        assert 0.05 <= waited < 5.0
        # An enforced level: no header.
        fast = await client.get("/fast")
        assert fast.status_code == 200 and HEADER not in fast.headers
        assert fast.headers["x-apf-priority-level"] == "strict"
    assert _shadowed(limiter).rejected["queue-full"] == 1  # /c's twin's

    # By default: no header, even for a request whose twin would have been rejected.
    limiter = Limiter(_config())
    probe = Probe()
    app = make_app("starlette", probe, limiter=limiter)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        tasks = [asyncio.create_task(client.get("/hold", params={"gate": gate})) for gate in "abc"]
        await wait_until(lambda: held("a", "b", "c"))
        for gate in "abc":
            probe.open(gate)
        answers = await asyncio.gather(*tasks)
    assert [r.status_code for r in answers] == [200] * 3
    assert not any(HEADER in r.headers for r in answers)
    assert _shadowed(limiter).rejected["queue-full"] == 1
