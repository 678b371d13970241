"""The middleware under a real uvicorn server: 429s, headers, seats of streams, errors."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from apf_limiter import Limiter
from tests.asgi.apps import FLAVOURS, Flavour, Probe, level_config, make_app
from tests.asgi.server import serve, wait_until

pytestmark = pytest.mark.timeout(60)


def _assert_idle(limiter: Limiter) -> None:
    stats = limiter.statistics()
    assert (stats.executing_requests, stats.waiting_requests, stats.executing_seats) == (0, 0, 0)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_overload_gets_429_with_retry_after_json_body_and_apf_headers(
    flavour: Flavour,
) -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app(flavour, probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        rejected = await client.get("/fast")
        assert rejected.status_code == 429
        assert rejected.json() == {"detail": "Too many requests, please try again later."}
        assert rejected.headers["content-type"] == "application/json"
        assert int(rejected.headers["retry-after"]) >= 1
        assert rejected.headers["x-apf-flow-schema"] == "everyone"
        assert rejected.headers["x-apf-priority-level"] == "test"
        probe.open("hold")
        executed = await held
        assert executed.status_code == 200
        assert executed.headers["x-apf-flow-schema"] == "everyone"
        assert executed.headers["x-apf-priority-level"] == "test"
        assert probe.entered == ["/hold?hold"]  # the rejected request never ran
    stats = limiter.statistics().priority_levels["test"]
    assert stats.rejected["concurrency-limit"] == 1
    _assert_idle(limiter)


async def test_queued_request_runs_once_seats_free_and_reports_its_wait() -> None:
    limiter = Limiter(level_config(limit=1))
    probe = Probe()
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        held = asyncio.create_task(client.get("/hold"))
        await wait_until(lambda: probe.entered == ["/hold?hold"])
        queued = asyncio.create_task(client.get("/fast", headers={"x-user": "bob"}))
        await wait_until(lambda: limiter.statistics().waiting_requests == 1)
        assert probe.entered == ["/hold?hold"]
        await asyncio.sleep(0.05)
        probe.open("hold")
        response = await queued
        assert response.status_code == 200
        assert response.json()["queue_wait"] >= 0.04
        assert (await held).status_code == 200
    _assert_idle(limiter)


async def test_streaming_response_holds_its_seat_until_the_body_is_complete() -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app("starlette", probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        async with client.stream("GET", "/stream") as response:
            lines = response.aiter_lines()
            assert await anext(lines) == "first"
            assert limiter.statistics().executing_requests == 1
            assert (await client.get("/fast")).status_code == 429
            probe.open("stream")
            assert await anext(lines) == "last"
        await wait_until(lambda: limiter.statistics().executing_requests == 0)
        assert (await client.get("/fast")).status_code == 200
    _assert_idle(limiter)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_sse_route_marked_long_running_releases_its_seat_at_response_start(
    flavour: Flavour,
) -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app(flavour, probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
        client.stream("GET", "/events") as response,
    ):
        assert response.headers["x-apf-priority-level"] == "test"
        lines = response.aiter_lines()
        assert await anext(lines) == "data: one"
        await wait_until(lambda: limiter.statistics().executing_requests == 0)
        # The seat is free while the event stream goes on.
        assert (await client.get("/fast")).status_code == 200
        probe.open("events")
        assert [line async for line in lines if line] == ["data: two"]
    _assert_idle(limiter)
    assert limiter.statistics().priority_levels["test"].dispatched == 2


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_handler_exception_gives_500_and_releases_the_seat(flavour: Flavour) -> None:
    limiter = Limiter(level_config(limit=1, reject=True))
    probe = Probe()
    async with (
        serve(make_app(flavour, probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await client.get("/boom")).status_code == 500
        assert limiter.statistics().executing_requests == 0
        assert (await client.get("/fast")).status_code == 200  # not rejected: the seat is back
    assert probe.entered == ["/boom", "/fast"]
    _assert_idle(limiter)


@pytest.mark.parametrize(("limit", "seats"), [(20, 3), (10, 1)])
async def test_marked_route_takes_its_seats_clamped_to_max_seats(limit: int, seats: int) -> None:
    # maxSeats = max(1, min(ceil(0.15 * limit), limit // handSize)): 3 at 20 seats, 1 at 10.
    limiter = Limiter(level_config(limit=limit, hand_size=6))
    assert limiter.statistics().priority_levels["test"].max_seats == seats
    async with (
        serve(make_app("fastapi", Probe(), limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        assert (await client.get("/heavy")).json() == {"seats": seats}
        assert (await client.get("/fast")).json()["seats"] == 1
    _assert_idle(limiter)


@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_statistics_return_to_zero_after_a_mixed_load(flavour: Flavour) -> None:
    limiter = Limiter(level_config(limit=4, queue_length_limit=100))
    probe = Probe()
    for gate in ("stream", "events", "ws"):
        probe.open(gate)
    async with (
        serve(make_app(flavour, probe, limiter=limiter)) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        paths = ["/fast", "/sleep?s=0.01", "/heavy", "/boom", "/stream", "/events"] * 5
        responses = await asyncio.gather(
            *(client.get(path, headers={"x-user": f"u{i % 3}"}) for i, path in enumerate(paths)),
            *(client.post("/upload", content=b"x" * 5000) for _ in range(5)),
        )
        codes = sorted({r.status_code for r in responses})
        assert codes == [200, 500]
        await wait_until(lambda: limiter.statistics().executing_requests == 0)
    _assert_idle(limiter)
    assert limiter.statistics().priority_levels["test"].dispatched == len(responses)
