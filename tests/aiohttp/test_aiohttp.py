"""The aiohttp front door against a real aiohttp server on 127.0.0.1, with a real client."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
from aiohttp import web

from apf_limiter import Limiter, Rejected
from apf_limiter.aiohttp import AiohttpMiddleware
from apf_limiter.gate import Identity, ResponseHeaders, SlowClients
from tests.aiohttp.server import make_app, serve
from tests.asgi.apps import Probe, level_config
from tests.asgi.server import wait_until
from tests.helpers import subject_schema

pytestmark = pytest.mark.timeout(60)


async def test_an_admitted_request_carries_the_apf_headers() -> None:
    limiter = Limiter(level_config(limit=2))
    headers = ResponseHeaders(queue_wait="X-APF-Queue-Wait")
    app, _ = make_app(Probe(), limiter=limiter, headers=headers)
    async with (
        serve(app) as url,
        aiohttp.ClientSession(url) as client,
        client.get("/fast", headers={"x-user": "alice"}) as response,
    ):
        assert response.status == 200
        assert await response.text() == "ok"
        assert response.headers["X-APF-Flow-Schema"] == "everyone"
        assert response.headers["X-APF-Priority-Level"] == "test"
        assert response.headers["X-APF-Queue-Wait"] == "0"
    stats = limiter.statistics().priority_levels["test"]
    assert stats.dispatched == 1
    assert limiter.statistics().executing_requests == 0


async def test_a_rejection_is_429_with_retry_after_and_the_headers() -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    app, _ = make_app(probe, limiter=limiter)
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold"])
        async with client.get("/fast") as response:
            assert response.status == 429
            assert int(response.headers["Retry-After"]) >= 1
            assert response.headers["X-APF-Flow-Schema"] == "everyone"
            assert response.headers["X-APF-Priority-Level"] == "test"
            assert response.content_type == "application/json"
            body = json.loads(await response.read())
            assert body == {"detail": "Too many requests, please try again later."}
        probe.open("hold")
        async with await held as response:
            assert response.status == 200
    assert probe.entered == ["/hold"]  # the rejected request never reached its handler
    assert limiter.statistics().priority_levels["test"].rejected["concurrency-limit"] == 1


async def test_a_queued_request_runs_once_the_seat_is_free() -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    app, _ = make_app(probe, limiter=limiter, headers=ResponseHeaders(queue_wait="X-Wait"))
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold"])
        queued = asyncio.create_task(client.get("/fast", headers={"x-user": "bob"}))
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        probe.open("hold")
        async with await queued as response:
            assert response.status == 200
            assert float(response.headers["X-Wait"]) > 0
        (await held).release()
    assert probe.entered == ["/hold", "/fast"]


async def test_the_request_deadline_answers_504_and_frees_the_seats() -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    app, _ = make_app(probe, limiter=limiter, slow_clients=SlowClients(request_timeout=0.3))
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/hold") as response:  # never opened: the deadline ends it
            assert response.status == 504
            assert response.headers["X-APF-Priority-Level"] == "test"
            body = json.loads(await response.read())
            assert body == {"detail": "The request did not complete within its deadline."}
        assert limiter.statistics().executing_requests == 0
        async with client.get("/fast") as response:  # the seat is free again
            assert response.status == 200


async def test_the_deadline_aborts_a_response_that_started() -> None:
    limiter = Limiter(level_config(limit=1))
    app, _ = make_app(Probe(), limiter=limiter, slow_clients=SlowClients(request_timeout=0.3))
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/stream") as response:
            assert response.status == 200  # started before the deadline: it ends unfinished
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(response.read(), 5)
        await wait_until(lambda: limiter.statistics().executing_requests == 0)


async def test_the_deadline_aborts_a_response_started_on_a_clone_of_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The on_response_prepare hook sees the clone, not the request the middleware holds.
    limiter = Limiter(level_config(limit=1))
    app, _ = make_app(Probe(), limiter=limiter, slow_clients=SlowClients(request_timeout=0.3))
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/cloned") as response:
            assert response.status == 200
            assert response.headers["X-APF-Priority-Level"] == "test"
            with pytest.raises(aiohttp.ClientPayloadError):  # ends unfinished, quietly
                await asyncio.wait_for(response.read(), 5)
        await wait_until(lambda: limiter.statistics().executing_requests == 0)
        async with client.get("/fast") as response:
            assert response.status == 200
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []  # no "Error handling request" from aiohttp


@pytest.mark.parametrize("handler_cancellation", [False, True], ids=["polled", "cancelled"])
async def test_a_client_that_leaves_while_queued_frees_its_place(
    handler_cancellation: bool,
) -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    app, _ = make_app(probe, limiter=limiter)
    async with (
        serve(app, handler_cancellation=handler_cancellation) as url,
        aiohttp.ClientSession(url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold"])
        host, port = url.removeprefix("http://").split(":")
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /fast HTTP/1.1\r\nhost: test\r\nx-user: bob\r\n\r\n")
        await writer.drain()
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        writer.close()
        await wait_until(lambda: limiter.statistics().waiting_requests == 0)
        stats = limiter.statistics().priority_levels["test"]
        assert stats.cancelled == 1
        assert stats.executing_requests == 1  # only the held request
        probe.open("hold")
        async with await held as response:
            assert response.status == 200
    assert probe.entered == ["/hold"]  # the request that left never ran
    assert limiter.statistics().priority_levels["test"].dispatched == 1
    assert limiter.statistics().executing_requests == 0


async def test_a_handler_error_gives_the_seats_back() -> None:
    limiter = Limiter(level_config(limit=1))
    app, _ = make_app(Probe(), limiter=limiter)
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        for _ in range(3):  # one seat: a leaked seat would queue the next one for good
            async with client.get("/fail") as response:
                assert response.status == 500
                assert response.headers["X-APF-Flow-Schema"] == "everyone"
        assert limiter.statistics().executing_requests == 0


async def test_a_long_running_stream_gives_its_seat_back_as_it_starts() -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    app, middleware = make_app(probe, limiter=limiter, max_long_running={"*": 1})
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/events") as stream:
            assert stream.status == 200
            assert stream.headers["X-APF-Priority-Level"] == "test"
            assert await stream.content.readline() == b"data: 1\n"
            # The stream is open and holds no seat: a short request runs at once.
            assert limiter.statistics().executing_requests == 0
            async with client.get("/fast") as response:
                assert response.status == 200
            assert middleware.gate.open_long_running("everyone") == 1
            async with client.get("/events") as refused:  # over the cap of one
                assert refused.status == 429
                assert refused.headers["Retry-After"] == "1"
            probe.open("events")
            assert (await stream.read()).endswith(b"data: 2\n\n")
        await wait_until(lambda: middleware.gate.open_long_running("everyone") == 0)


@pytest.mark.parametrize("handler_cancellation", [False, True], ids=["polled", "cancelled"])
async def test_a_long_running_stream_whose_client_left_gives_its_cap_place_back(
    handler_cancellation: bool,
) -> None:
    # An idle event stream has neither seats nor a deadline: with handler_cancellation off,
    # only the middleware's look at the connection ends it once its client is gone.
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    app, middleware = make_app(probe, limiter=limiter, max_long_running={"*": 1})
    async with serve(app, handler_cancellation=handler_cancellation) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /events HTTP/1.1\r\nhost: test\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"data: 1\n\n"), 5)
        assert middleware.gate.open_long_running("everyone") == 1
        writer.transport.abort()  # the client goes away while the stream idles
        await wait_until(lambda: middleware.gate.open_long_running("everyone") == 0, 3)
        assert probe.entered == ["/events", "cancelled"]  # the handler was stopped
        async with aiohttp.ClientSession(url) as client, client.get("/events") as stream:
            assert stream.status == 200  # the cap has its place back
            assert await stream.content.readline() == b"data: 1\n"
            probe.open("events")
            assert (await stream.read()).endswith(b"data: 2\n\n")
    assert limiter.statistics().executing_requests == 0


async def test_a_websocket_is_long_running() -> None:
    limiter = Limiter(level_config(limit=1))
    app, _ = make_app(Probe(), limiter=limiter, slow_clients=SlowClients(request_timeout=0.2))
    async with (
        serve(app) as url,
        aiohttp.ClientSession(url) as client,
        client.ws_connect("/ws") as ws,
    ):
        assert limiter.statistics().executing_requests == 0  # its seat went back
        await asyncio.sleep(0.4)  # past the deadline: accepted WebSockets have none
        await ws.send_str("ping")
        assert await asyncio.wait_for(ws.receive_str(), 5) == "ping"
    assert limiter.statistics().priority_levels["test"].dispatched == 1


async def test_hooks_an_awaitable_identity_and_a_custom_rejection() -> None:
    config = level_config(limit=1, reject=True)
    # carol alone matches the first schema: the user and groups come from the hook.
    config["flowSchemas"].insert(0, subject_schema("carol", "test", user="carol", precedence=10))
    limiter = Limiter(config)
    probe = Probe()

    async def identify(request: web.Request) -> Identity | None:
        return Identity(request.headers.get("x-user", "nobody"), ("staff",))

    def on_reject(request: web.Request, rejected: Rejected) -> web.StreamResponse:
        return web.Response(status=503, text=f"busy: {rejected.reason}")

    app, _ = make_app(probe, limiter=limiter, identify=identify, on_reject=on_reject)
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        held = asyncio.create_task(client.get("/hold", headers={"x-user": "carol"}))
        await wait_until(lambda: probe.entered == ["/hold"])
        async with client.get("/fast") as response:
            assert response.status == 503
            assert await response.text() == "busy: concurrency-limit"
            assert int(response.headers["Retry-After"]) >= 1
            assert response.headers["X-APF-Flow-Schema"] == "everyone"
        probe.open("hold")
        async with await held as response:
            assert response.headers["X-APF-Flow-Schema"] == "carol"


async def test_a_limiter_it_creates_is_closed_at_cleanup() -> None:
    app, middleware = make_app(Probe())
    async with serve(app) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/fast") as response:
            assert response.headers["X-APF-Flow-Schema"] == "anonymous"  # the default config
        assert not middleware.limiter.closed
    assert middleware.limiter.closed


def test_contradicting_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="limiter or a config"):
        AiohttpMiddleware(limiter=Limiter(), config=level_config(limit=1))
    with pytest.raises(ValueError, match="disconnect_poll"):
        AiohttpMiddleware(disconnect_poll=0)
    with pytest.raises(ValueError, match="invalid header name"):
        AiohttpMiddleware(headers=ResponseHeaders(flow_schema="bad name"))


@pytest.mark.parametrize(
    "upgrade",
    [
        {"Upgrade": "websocket", "Connection": "Upgrade"},  # a hostile client's guess
        {"Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings"},  # curl --http2
    ],
    ids=["websocket", "h2c"],
)
async def test_an_upgrade_header_alone_does_not_make_a_stream_long_running(
    upgrade: dict[str, str],
) -> None:
    # Only a WebSocket accepted is long-running by default: a client's Upgrade header on an
    # ordinary streamed response must not take its seat back, nor end its deadline, early.
    limiter = Limiter(level_config(limit=1))
    app, middleware = make_app(
        Probe(),
        limiter=limiter,
        slow_clients=SlowClients(request_timeout=0.3),
        max_long_running={"*": 5},
    )
    async with (
        serve(app) as url,
        aiohttp.ClientSession(url) as client,
        client.get("/stream", headers=upgrade) as response,
    ):
        assert response.status == 200
        assert await response.content.readline() == b"part\n"
        assert limiter.statistics().executing_requests == 1  # it holds its seat while streaming
        with pytest.raises(aiohttp.ClientPayloadError):  # its deadline aborts it
            await asyncio.wait_for(response.read(), 5)
    await wait_until(lambda: limiter.statistics().executing_requests == 0)
    assert middleware.gate.open_long_running("everyone") == 0
