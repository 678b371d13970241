"""WebSockets under a real uvicorn server: admission, queueing, and the 429 denial response."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apf_limiter import Limiter
from tests.asgi.apps import FLAVOURS, Flavour, Probe, level_config, make_app
from tests.asgi.server import serve, wait_until

pytestmark = pytest.mark.timeout(60)


def _ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_websocket_is_admitted_and_gives_its_seat_back_once_accepted(
    flavour: Flavour,
) -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app(flavour, probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
        connect(_ws_url(url), additional_headers={"x-user": "alice"}) as ws,
    ):
        assert ws.response is not None
        assert ws.response.headers["x-apf-flow-schema"] == "everyone"
        assert ws.response.headers["x-apf-priority-level"] == "test"
        await wait_until(lambda: probe.entered == ["/ws"])
        assert limiter.statistics().executing_requests == 0
        # The only seat is free again while the socket stays open.
        assert (await client.get("/fast")).status_code == 200
        await ws.send("hi")
        probe.open("ws")
        assert await ws.recv() == "echo hi"
    stats = limiter.statistics()
    assert (stats.executing_requests, stats.priority_levels["test"].dispatched) == (0, 2)


async def test_queued_websocket_is_admitted_when_a_seat_frees() -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    probe.open("ws")
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])

        async def chat() -> str:
            async with connect(_ws_url(url), additional_headers={"x-user": "bob"}) as ws:
                await ws.send("queued")
                return str(await ws.recv())

        chatting = asyncio.create_task(chat())
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        assert probe.entered == ["/hold?hold"]
        probe.open("hold")
        # websocket.connect, read while the socket waited, is replayed to the app's accept().
        assert await asyncio.wait_for(chatting, 5) == "echo queued"
        await held
    assert limiter.statistics().executing_requests == 0


async def test_rejected_websocket_gets_a_429_denial_response_where_supported() -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app("fastapi", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        with pytest.raises(InvalidStatus) as raised:
            async with connect(_ws_url(url)):
                pass
        response = raised.value.response
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1
        assert response.headers["x-apf-priority-level"] == "test"
        assert json.loads(response.body or b"") == {
            "detail": "Too many requests, please try again later."
        }
        probe.open("hold")
        await held
    assert probe.entered == ["/hold?hold"]
    assert limiter.statistics().priority_levels["test"].rejected["concurrency-limit"] == 1
