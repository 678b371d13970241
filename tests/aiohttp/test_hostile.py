"""Hostile clients and an unlucky operator against the aiohttp front door, on a real server.

After each attack nothing may be held (no seat, no queued request, no place under
``max_long_running``), the counts must add up, and the server must still serve.
"""

from __future__ import annotations

import asyncio
import random

import aiohttp
import pytest

from apf_limiter import Limiter
from apf_limiter.aiohttp import AiohttpMiddleware
from tests.aiohttp.server import make_app, serve
from tests.asgi.apps import Probe, level_config
from tests.asgi.server import wait_until

pytestmark = pytest.mark.timeout(60)


async def assert_settled(limiter: Limiter, middleware: AiohttpMiddleware) -> None:
    """Nothing held once the traffic stopped, and every request that came is counted once."""

    def idle() -> bool:
        stats = limiter.statistics()
        return (
            stats.executing_requests == 0
            and stats.executing_seats == 0
            and stats.waiting_requests == 0
            and middleware.gate.open_long_running("everyone") == 0
        )

    await wait_until(idle, 5)
    schema = limiter.statistics().flow_schemas["everyone"]
    ended = schema.dispatched + sum(schema.rejected.values()) + schema.cancelled
    assert schema.matched == ended, schema


async def request(
    port: int, path: str, user: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nhost: test\r\nx-user: {user}\r\nconnection: close\r\n\r\n".encode()
    )
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("handler_cancellation", [False, True], ids=["polled", "cancelled"])
async def test_a_storm_of_disconnects_against_a_saturated_level(handler_cancellation: bool) -> None:
    # 200 clients on 2 seats; every other one leaves at a random moment (queued, running or
    # done), half of those by a reset, half by a clean close.
    limiter = Limiter(level_config(limit=2, queues=8, hand_size=2, queue_length_limit=200))
    app, middleware = make_app(Probe(), limiter=limiter, disconnect_poll=0.02)
    rng = random.Random(7)
    async with serve(app, handler_cancellation=handler_cancellation) as url:
        port = int(url.rsplit(":", 1)[1])
        answered: list[bytes] = []

        async def client(i: int) -> None:
            path = rng.choice(["/sleep?s=0.02", "/sleep?s=0.05", "/fast"])
            reader, writer = await request(port, path, f"user-{i % 13}")
            if i % 2:
                await asyncio.sleep(rng.random())
                if rng.random() < 0.5:
                    writer.transport.abort()
                else:
                    writer.close()
                return
            answered.append((await asyncio.wait_for(reader.read(), 20))[:12])
            writer.close()

        await asyncio.gather(*(client(i) for i in range(200)))
        assert answered == [b"HTTP/1.1 200"] * 100  # those that stayed were all served
        await assert_settled(limiter, middleware)
        cancelled = limiter.statistics().flow_schemas["everyone"].cancelled
        assert 0 < cancelled <= 100  # some left while queued, and left their queue
        async with aiohttp.ClientSession(url) as session, session.get("/fast") as response:
            assert response.status == 200


@pytest.mark.parametrize("handler_cancellation", [False, True], ids=["polled", "cancelled"])
async def test_a_shutdown_with_requests_queued_running_and_streaming(
    handler_cancellation: bool,
) -> None:
    # runner.cleanup() while 2 requests hold both seats, 2 event streams are open and 4
    # requests wait: aiohttp cancels what is left after its shutdown_timeout (1 s here).
    limiter = Limiter(level_config(limit=2))
    app, middleware = make_app(Probe(), limiter=limiter, max_long_running={"*": 10})
    async with serve(app, handler_cancellation=handler_cancellation) as url:
        port = int(url.rsplit(":", 1)[1])
        clients = [await request(port, "/events", "watcher") for _ in range(2)]
        for reader, _ in clients:  # streaming: their seats went back
            await asyncio.wait_for(reader.readuntil(b"data: 1\n\n"), 5)
        clients += [await request(port, "/hold", f"user-{i}") for i in range(2)]
        await wait_until(lambda: limiter.statistics().executing_requests == 2)
        clients += [await request(port, "/fast", f"user-{i}") for i in range(4)]
        await wait_until(lambda: limiter.statistics().waiting_requests == 4)
    await assert_settled(limiter, middleware)
    assert limiter.statistics().flow_schemas["everyone"].matched == 8
    for _, writer in clients:
        writer.close()
    # The same limiter behind a new server: it serves at once (no seat was lost).
    app, middleware = make_app(Probe(), limiter=limiter)
    async with (
        serve(app) as url,
        aiohttp.ClientSession(url) as session,
        session.get("/fast") as response,
    ):
        assert response.status == 200
    assert limiter.statistics().executing_requests == 0
