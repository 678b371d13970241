"""Queued requests under a real uvicorn server: disconnects, bodies, and fairness."""

from __future__ import annotations

import asyncio
import hashlib
import random
import statistics
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter._demo.app import SemaphoreMiddleware
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import ASGIApp
from tests.asgi.apps import Probe, level_config, make_app, user_from_header
from tests.asgi.server import serve, wait_until

pytestmark = pytest.mark.timeout(60)


async def _raw_request(url: str, request: bytes) -> asyncio.StreamWriter:
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    return writer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /fast HTTP/1.1\r\nhost: test\r\nx-user: bob\r\n\r\n",
        b"POST /upload HTTP/1.1\r\nhost: test\r\nx-user: bob\r\ncontent-length: 5\r\n\r\nhello",
        b"POST /upload HTTP/1.1\r\nhost: test\r\nx-user: bob\r\ncontent-length: 9\r\n\r\npartial",
    ],
    ids=["no-body", "whole-body", "partial-body"],
)
async def test_client_that_disconnects_while_queued_never_reaches_the_app(
    request_bytes: bytes,
) -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        writer = await _raw_request(url, request_bytes)
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        writer.close()
        await wait_until(lambda: limiter.statistics().waiting_requests == 0)
        stats = limiter.statistics().priority_levels["test"]
        assert stats.cancelled == 1
        probe.open("hold")
        assert (await held).status_code == 200
        assert (await client.get("/fast")).status_code == 200
    assert probe.entered == ["/hold?hold", "/fast"]  # the queued request never ran
    assert limiter.statistics().priority_levels["test"].dispatched == 2


@pytest.mark.parametrize("size", [20_000, 1_500_000], ids=["buffered", "over-the-buffer"])
async def test_streaming_upload_admitted_after_queueing_arrives_intact(size: int) -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    data = random.Random(size).randbytes(size)
    sent = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, size, 7_000):
            yield data[start : start + 7_000]
        sent.set()

    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        upload = asyncio.create_task(
            client.post("/upload", content=chunks(), headers={"x-user": "bob"})
        )
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        if size < 65536:
            await asyncio.wait_for(sent.wait(), 5)  # the whole body came in while queued
            await asyncio.sleep(0.05)
        else:
            # The middleware keeps 64 KiB and stops reading; the rest stays with the server.
            await asyncio.sleep(0.1)
        assert probe.entered == ["/hold?hold"]
        probe.open("hold")
        response = await upload
        assert response.json() == {"sha256": hashlib.sha256(data).hexdigest(), "size": size}
        await held
    assert limiter.statistics().executing_requests == 0


def _sleep_app() -> Starlette:
    async def work(request: Request) -> PlainTextResponse:
        await asyncio.sleep(0.04)
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/work", work)])


async def _mice_latencies(app: ASGIApp, seconds: float) -> list[float]:
    """Latencies of 3 mice (one request at a time) while an elephant keeps 16 in flight."""
    latencies: list[float] = []
    async with (
        serve(app) as url,
        httpx.AsyncClient(
            base_url=url, limits=httpx.Limits(max_connections=32), timeout=30
        ) as client,
    ):
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds

        async def elephant() -> None:
            while loop.time() < end:
                response = await client.get("/work", headers={"x-user": "elephant"})
                if response.status_code == 429:
                    await asyncio.sleep(0.05)

        async def mouse(name: str) -> None:
            await asyncio.sleep(0.3)  # let the elephant fill the server first
            while loop.time() < end:
                started = time.perf_counter()
                response = await client.get("/work", headers={"x-user": name})
                assert response.status_code == 200
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.03)

        await asyncio.gather(*(elephant() for _ in range(16)), *(mouse(f"m{i}") for i in range(3)))
    return latencies


async def test_mice_keep_low_latency_while_an_elephant_floods() -> None:
    baseline = await _mice_latencies(SemaphoreMiddleware(_sleep_app(), capacity=2), 2.0)
    # Hand size 1: the elephant's backlog sits in one queue, which fair queuing serves like
    # any mouse's queue (with a bigger hand it would get a few queues' worth of turns).
    limiter = Limiter(level_config(limit=2, hand_size=1, queue_length_limit=50))
    apf = await _mice_latencies(
        APFMiddleware(_sleep_app(), limiter=limiter, identify=user_from_header), 2.0
    )
    assert len(baseline) >= 5 and len(apf) >= 5
    # Behind the semaphore a mouse waits behind the elephant's ~14 queued requests (~7 service
    # times); with APF it has its own queue and gets one of the next free seats.
    assert statistics.median(apf) * 2 < statistics.median(baseline)
    assert limiter.statistics().executing_requests == 0
