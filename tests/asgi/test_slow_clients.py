"""Slow clients under a real uvicorn server: they cannot keep seats past their deadlines.

Bounded in real time: small deadlines (about a second), every wait capped.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, route_options
from tests.asgi.apps import Probe, level_config, make_app, middleware_of, user_from_header
from tests.asgi.server import serve, wait_until

pytestmark = pytest.mark.timeout(60)


async def _connect(
    url: str, head: bytes, *, small_buffer: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_buffer:  # a client that never reads: let the server's writes back up soon
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(head)
    await writer.drain()
    return reader, writer


async def _status_line(reader: asyncio.StreamReader) -> bytes:
    return (await asyncio.wait_for(reader.readline(), 5)).strip()


async def _trickle(writer: asyncio.StreamWriter, times: int, period: float) -> None:
    """Send one body byte every ``period`` seconds, ``times`` times at most."""
    for _ in range(times):
        try:
            writer.write(b"x")
            await writer.drain()
        except ConnectionError:
            return
        await asyncio.sleep(period)


RESET = b"(connection reset)"


async def _status_or_reset(reader: asyncio.StreamReader) -> bytes:
    try:
        return await _status_line(reader)
    except ConnectionResetError:
        # The server answered 408 and closed while a trickled byte was on its way: the reset
        # its kernel sends back can discard the answer before the client reads it (seen on a
        # loaded machine). The seats are checked below all the same.
        return RESET


async def test_slow_uploaders_lose_their_seats_and_others_are_served_meanwhile() -> None:
    # Four uploads at 2 B/s took all four seats, and every other flow got 429; now the
    # minimum body rate (here after a 0.5 s grace period) frees them within a second.
    limiter = Limiter(level_config(limit=4, wait_limit=10))
    probe = Probe()
    app = make_app("starlette", probe, limiter=limiter, body_rate_grace=0.5)
    head = b"POST /upload HTTP/1.1\r\nhost: t\r\nx-user: slow%d\r\ncontent-length: 100000\r\n\r\n"
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        uploads = [await _connect(url, head % i) for i in range(4)]

        trickles = [asyncio.create_task(_trickle(w, 20, 0.5)) for _, w in uploads]  # 2 B/s
        await wait_until(lambda: limiter.statistics().executing_requests == 4)
        started = time.monotonic()
        response = await client.get("/fast", headers={"x-user": "other"})
        assert response.status_code == 200
        assert time.monotonic() - started < 3  # queued until the uploads were cut off
        for task in trickles:
            task.cancel()
        statuses = [await _status_or_reset(r) for r, _ in uploads]
        timeout = b"HTTP/1.1 408 Request Timeout"
        assert set(statuses) <= {timeout, RESET} and timeout in statuses, statuses
        for _, writer in uploads:
            writer.close()
        assert limiter.statistics().executing_requests == 0
        # The seats were free again: nothing was rejected meanwhile.
        assert limiter.statistics().priority_levels["test"].rejected["queue-full"] == 0


async def test_clients_that_never_read_a_streamed_response_lose_their_seats() -> None:
    limiter = Limiter(level_config(limit=4, wait_limit=10))
    probe = Probe()
    app = make_app("starlette", probe, limiter=limiter, request_timeout=1.0)
    head = b"GET /firehose HTTP/1.1\r\nhost: t\r\nx-user: sink%d\r\n\r\n"
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        sinks = [await _connect(url, head % i, small_buffer=True) for i in range(4)]
        await wait_until(lambda: limiter.statistics().executing_requests == 4)
        started = time.monotonic()
        response = await client.get("/fast", headers={"x-user": "other"})
        assert response.status_code == 200
        assert time.monotonic() - started < 3
        await wait_until(lambda: limiter.statistics().executing_requests == 0, timeout=1)
        # The responses had started: they were ended unfinished and the connections closed.
        for reader, writer in sinks:
            assert (await _status_line(reader)) == b"HTTP/1.1 200 OK"
            while await asyncio.wait_for(reader.read(1 << 20), 5):
                pass  # drains to the end: the server closed the connection
            writer.close()


async def test_a_client_gone_from_the_queue_is_noticed_despite_expect_100_continue() -> None:
    # "Expect: 100-continue" without a body made the middleware stop watching such requests:
    # most ran although their clients had left the queue.
    limiter = Limiter(level_config(limit=1, wait_limit=10))
    probe = Probe()
    head = b"GET /fast HTTP/1.1\r\nhost: t\r\nx-user: u%d\r\nexpect: 100-continue\r\n\r\n"
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        gone = [await _connect(url, head % i) for i in range(5)]
        await wait_until(lambda: limiter.statistics().waiting_requests == 5)
        for _, writer in gone:
            writer.close()
        await wait_until(lambda: limiter.statistics().waiting_requests == 0)
        probe.open("hold")
        assert (await held).status_code == 200
    assert probe.entered == ["/hold?hold"]
    assert limiter.statistics().priority_levels["test"].cancelled == 5


async def test_the_body_kept_while_queued_is_bounded_per_request_and_in_total() -> None:
    limiter = Limiter(level_config(limit=1, wait_limit=30))
    probe = Probe()
    app = make_app(
        "starlette",
        probe,
        limiter=limiter,
        max_body_buffer=1000,
        max_total_body_buffer=1500,
        min_body_rate=None,
    )
    size = 1_000_000
    bodies = [random.Random(i).randbytes(size) for i in range(3)]
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        budget = middleware_of(app)._body_budget
        uploads = []
        for i, body in enumerate(bodies):
            uploads.append(
                asyncio.create_task(
                    client.post("/upload", content=body, headers={"x-user": f"u{i}"})
                )
            )
            waiting = i + 1
            await wait_until(lambda: limiter.statistics().waiting_requests == waiting)  # noqa: B023
            await asyncio.sleep(0.2)  # let the watchers read what they may
        # The first kept below its 1000 bytes, plus one message (of the server's size); the
        # total cap (1500) stopped the others from reading at all.
        assert 0 < budget.peak < 1000 + budget.largest
        assert budget.kept == budget.peak
        probe.open("hold")
        responses = await asyncio.gather(*uploads)
        assert [r.json() for r in responses] == [
            {"sha256": hashlib.sha256(body).hexdigest(), "size": size} for body in bodies
        ]
        await held
        assert budget.kept == 0  # every kept byte went back as it was replayed


def _long_running_app(limiter: Limiter, **middleware: Any) -> Starlette:
    """Long-running routes: POST, then stream the answer; and a long poll that never answers."""

    @route_options(long_running=True)
    async def ingest(request: Request) -> Response:
        size = len(await request.body())

        async def events() -> AsyncIterator[bytes]:
            yield b"data: %d\n\n" % size

        return StreamingResponse(events(), media_type="text/event-stream")

    @route_options(long_running=True)
    async def poll(request: Request) -> Response:
        await asyncio.Event().wait()  # nothing to tell, ever
        return PlainTextResponse("never")

    async def fast(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            Route("/ingest", ingest, methods=["POST"]),
            Route("/poll", poll),
            Route("/fast", fast),
        ]
    )
    app.add_middleware(APFMiddleware, limiter=limiter, identify=user_from_header, **middleware)
    return app


@pytest.mark.parametrize("client", ["uploads", "polls"])
async def test_long_running_routes_cannot_hold_seats_before_their_response_starts(
    client: str,
) -> None:
    # Eight uploads at 1 B/s to a long-running POST route, or eight long polls that never
    # answer, held all eight seats for good (no 408, no 504): every other request waited
    # until its 429. Until their responses start, they are bound like any other request.
    limiter = Limiter(level_config(limit=8, wait_limit=10))
    app = _long_running_app(limiter, body_rate_grace=0.5, request_timeout=1.0)
    if client == "uploads":
        head = b"POST /ingest HTTP/1.1\r\nhost: t\r\nx-user: slow%d\r\ncontent-length: 1000\r\n\r\n"
        expected = b"HTTP/1.1 408 Request Timeout"
    else:
        head = b"GET /poll HTTP/1.1\r\nhost: t\r\nx-user: poll%d\r\n\r\n"
        expected = b"HTTP/1.1 504 Gateway Timeout"
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        hogs = [await _connect(url, head % i) for i in range(8)]

        trickles = (
            [asyncio.create_task(_trickle(w, 10, 1.0)) for _, w in hogs]  # 1 B/s
            if client == "uploads"
            else []
        )
        await wait_until(lambda: limiter.statistics().executing_requests == 8)
        started = time.monotonic()
        responses = await asyncio.gather(
            *(http.get("/fast", headers={"x-user": f"innocent{i}"}) for i in range(4))
        )
        assert [r.status_code for r in responses] == [200] * 4
        assert time.monotonic() - started < 4  # queued until the hogs were cut off
        for task in trickles:
            task.cancel()
        statuses = [await _status_or_reset(r) for r, _ in hogs]
        assert set(statuses) <= {expected, RESET} and expected in statuses, statuses
        for _, writer in hogs:
            writer.close()
        await wait_until(lambda: limiter.statistics().executing_requests == 0)
        level = limiter.statistics().priority_levels["test"]
        assert sum(level.rejected.values()) == 0  # nothing was turned away meanwhile
        # A long-running request that answers in time streams on, exempt from then on.
        answered = await http.post("/ingest", content=b"y" * 1000, headers={"x-user": "fine"})
        assert (answered.status_code, answered.text) == (200, "data: 1000\n\n")
