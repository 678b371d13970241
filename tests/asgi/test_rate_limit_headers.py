"""Issue 28, item 7, under real servers: the IETF RateLimit fields (opt-in) and the per-level
rejection status, through the ASGI middleware under uvicorn and the aiohttp front door."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import httpx
import pytest

from apf_limiter import Limiter
from apf_limiter.asgi import ResponseHeaders
from tests.aiohttp.server import make_app as make_aiohttp_app
from tests.aiohttp.server import serve as serve_aiohttp
from tests.asgi.apps import Probe, level_config, make_app
from tests.asgi.server import serve, wait_until

pytestmark = pytest.mark.timeout(60)

# draft-ietf-httpapi-ratelimit-headers-10: a List of one Item, a String with parameters; a
# partition key is a Byte Sequence (base64 between colons).
_PK = r"pk=:[A-Za-z0-9+/]+=*:"
POLICY = re.compile(rf'^"test";q=(\d+);qu="concurrent-requests";{_PK}$')
LIMIT = re.compile(rf'^"test";r=(\d+);{_PK}(;t=(\d+))?$')
ON = ResponseHeaders(rate_limit=True)


def _pk(value: str) -> str:
    match = re.search(_PK, value)
    assert match is not None
    return match.group(0)


async def test_uvicorn_sends_the_ratelimit_fields_and_the_levels_status() -> None:
    config = {**level_config(limit=2, reject=True), "priorityLevelRejectionStatus": {"test": 503}}
    limiter = Limiter(config)
    probe = Probe()
    app = make_app("starlette", probe, limiter=limiter, headers=ON)
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        quiet = await client.get("/fast", headers={"x-user": "alice"})
        assert quiet.status_code == 200
        policy = POLICY.match(quiet.headers["ratelimit-policy"])
        current = LIMIT.match(quiet.headers["ratelimit"])
        assert policy is not None and current is not None
        assert policy.group(1) == "2"  # the level's current limit
        assert current.group(1) == "1"  # its own seat is in use as the response starts
        held = asyncio.create_task(client.get("/hold", headers={"x-user": "bob"}))
        await wait_until(lambda: probe.entered[-1:] == ["/hold?hold"])
        busy = await client.get("/fast", headers={"x-user": "carol"})
        assert LIMIT.match(busy.headers["ratelimit"]).group(1) == "0"  # type: ignore[union-attr]
        held_too = asyncio.create_task(client.get("/hold?gate=two", headers={"x-user": "dan"}))
        await wait_until(lambda: probe.entered[-1:] == ["/hold?two"])
        refused = await client.get("/fast", headers={"x-user": "erin"})
        assert refused.status_code == 503  # the level's rejectionStatus
        assert int(refused.headers["retry-after"]) >= 1
        limit = LIMIT.match(refused.headers["ratelimit"])
        assert limit is not None and limit.group(1) == "0"
        assert limit.group(3) == refused.headers["retry-after"]  # t: the Retry-After
        assert POLICY.match(refused.headers["ratelimit-policy"]) is not None
        probe.open("hold")
        probe.open("two")
        assert (await held).status_code == 200 and (await held_too).status_code == 200
    # The partition key names the flow: the same for the policy and the limit of a response.
    assert _pk(quiet.headers["ratelimit-policy"]) == _pk(quiet.headers["ratelimit"])


async def test_uvicorn_sends_no_ratelimit_fields_unless_asked() -> None:
    limiter = Limiter(level_config(limit=2, reject=True))
    probe = Probe()
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        response = await client.get("/fast", headers={"x-user": "alice"})
    assert "ratelimit" not in response.headers and "ratelimit-policy" not in response.headers


async def test_aiohttp_sends_the_ratelimit_fields_and_the_levels_status() -> None:
    config = {**level_config(limit=1, reject=True), "rejectionStatus": 503}
    limiter = Limiter(config)
    probe = Probe()
    app, _ = make_aiohttp_app(probe, limiter=limiter, headers=ON)
    async with serve_aiohttp(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/fast", headers={"x-user": "alice"}) as response:
            assert response.status == 200
            policy = POLICY.match(response.headers["RateLimit-Policy"])
            assert policy is not None and policy.group(1) == "1"
            # aiohttp starts a returned response after its handler's seats went back.
            assert LIMIT.match(response.headers["RateLimit"]).group(1) == "1"  # type: ignore[union-attr]
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/fast", "/hold"])
        async with client.get("/fast") as refused:
            assert refused.status == 503
            limit = LIMIT.match(refused.headers["RateLimit"])
            assert limit is not None and limit.group(3) == refused.headers["Retry-After"]
        probe.open("hold")
        async with await held as response:
            assert response.status == 200
