"""Queues that respect client deadlines over real HTTP (uvicorn): the timeout header."""

from __future__ import annotations

import asyncio
import time

import httpx

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.gate import ClientDeadlines, SlowClients
from tests.asgi.apps import level_config
from tests.asgi.server import serve, wait_until

HEADER = "x-envoy-expected-rq-timeout-ms"


def _app(release: asyncio.Event, started: list[str]) -> APFMiddleware:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan
        started.append(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limiter = Limiter(level_config(limit=1, queues=1, hand_size=1, queue_length_limit=4))
    return APFMiddleware(
        app,
        limiter=limiter,
        client_deadlines=ClientDeadlines(header=HEADER),
        slow_clients=SlowClients(min_body_rate=None),
    )


async def test_the_timeout_header_bounds_the_wait_as_a_429() -> None:
    release, started = asyncio.Event(), list[str]()
    middleware = _app(release, started)
    level = middleware.limiter.statistics  # read after the requests
    async with serve(middleware) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        first = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: started == ["/hold"])
        began = time.monotonic()
        late = await client.get("/late", headers={HEADER: "300"})
        waited = time.monotonic() - began
        # Hostile values are ignored: this one waits the full wait limit, so it is cancelled.
        hostile = asyncio.create_task(client.get("/hostile", headers={HEADER: "1e9"}))
        await wait_until(lambda: level().waiting_requests == 1)
        release.set()
        assert (await first).status_code == 200
        assert (await hostile).status_code == 200
    assert late.status_code == 429 and "retry-after" in late.headers
    assert 0.25 <= waited < 5.0  # 300 ms, not the 15 s requestWaitLimit
    assert started == ["/hold", "/hostile"]  # the late one never ran
    stats = level().priority_levels["test"]
    assert stats.timed_out == 1
