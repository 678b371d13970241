"""APFMiddleware's grouped options, and the keyword arguments of earlier releases folded in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apf_limiter import Limiter
from apf_limiter.asgi import (
    APFMiddleware,
    BodyBuffer,
    DebugEndpoints,
    Identity,
    IdentityHooks,
    ResponseHeaders,
    SlowClients,
)
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app


def _names(driver: Driver) -> set[str]:
    return set(driver.start()["headers"])


async def _call(middleware: APFMiddleware, path: str = "/") -> Driver:
    driver = Driver()
    await middleware(http_scope(path), driver.receive, driver.send)
    return driver


async def test_response_headers_are_one_value() -> None:
    shown = APFMiddleware(ok_app, headers=ResponseHeaders(priority_level=None, queue_wait="X-W"))
    names = _names(await _call(shown))
    assert "x-apf-flow-schema" in names and "x-w" in names
    assert "x-apf-priority-level" not in names
    none = _names(await _call(APFMiddleware(ok_app, headers=None)))
    assert not {"x-apf-flow-schema", "x-apf-priority-level"} & none


async def test_identity_hooks_are_one_value() -> None:
    seen: list[str] = []
    limiter = Limiter(level_config(limit=1))

    def identify(scope: Scope) -> Identity:
        seen.append(scope["path"])
        return Identity("alice")

    middleware = APFMiddleware(ok_app, limiter=limiter, identity=IdentityHooks(identify=identify))
    assert (await _call(middleware, "/a")).start()["status"] == 200
    assert seen == ["/a"]


async def test_slow_clients_are_one_value() -> None:
    clock = FakeClock()
    limiter = Limiter(level_config(limit=1), clock=clock)

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(3600)

    middleware = APFMiddleware(slow, limiter=limiter, slow_clients=SlowClients(request_timeout=2))
    driver = Driver()
    task = asyncio.create_task(middleware(http_scope(), driver.receive, driver.send))
    await clock.advance(2.5)
    await task
    assert driver.start()["status"] == 504


def test_body_buffer_and_slow_clients_check_their_values() -> None:
    with pytest.raises(ValueError, match="max_body_buffer"):
        BodyBuffer(max=-1)
    with pytest.raises(ValueError, match="min_body_rate"):
        SlowClients(min_body_rate=0)


async def test_debug_endpoints_are_one_value() -> None:
    middleware = APFMiddleware(ok_app, debug=DebugEndpoints(authorize=lambda scope: True))
    driver = await _call(middleware, "/debug/api_priority_and_fairness/dump_priority_levels")
    assert driver.start()["status"] == 200
    assert (await _call(APFMiddleware(ok_app), "/debug/api_priority_and_fairness/x")).start()[
        "status"
    ] == 200  # not served: the app answers


async def test_the_keywords_of_earlier_releases_still_work() -> None:
    legacy: dict[str, Any] = {"flow_schema_header": "X-S", "response_headers": False}
    names = _names(await _call(APFMiddleware(ok_app, **legacy)))
    assert not {"x-s", "x-apf-flow-schema", "x-apf-priority-level"} & names
    names = _names(
        await _call(APFMiddleware(ok_app, shadow_header="X-Sh", flow_schema_header="X-S"))
    )
    assert "x-s" in names and "x-apf-priority-level" in names
    with pytest.raises(TypeError, match="unexpected keyword argument 'identfy'"):
        APFMiddleware(ok_app, identfy=None)
