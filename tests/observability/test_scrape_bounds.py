"""A scrape's cost and size are bounded: not by the depth of the queues, not by a client's header.

Issue 25, items 3 and 4: with 3,000 requests queued a scrape copied and walked every one of
them on the event loop (86-128 ms each), and a client's header became a ``distinguisher`` label
as long as the server allowed (1 MB under httptools: a 9 MB scrape).
"""

from __future__ import annotations

import asyncio
import importlib.util
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from apf_limiter import Admission, Limiter, Rejected, RequestDigest
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.server import serve, wait_until

prometheus_client = pytest.importorskip("prometheus_client")

from apf_limiter.observability import (  # noqa: E402
    PrometheusMetrics,
    dashboard_feed,
    dump_priority_levels,
    dump_queues,
    dump_top_flows,
    metrics_app,
)
from apf_limiter.observability._cut import CUT_MARK, MAX_CELL_WIDTH  # noqa: E402

USERS = ("alice", "bob", "carol", "dave", "erin")


def _queued(count: int, top_flows: int) -> tuple[Limiter, Any, list[Admission]]:
    """A level of 2 seats, held, and ``count`` requests of five users waiting (two queues)."""
    config = level_config(limit=2, queues=2, hand_size=1, queue_length_limit=5000, wait_limit=60)
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry, top_flows=top_flows)
    limiter = Limiter(config, clock=FakeClock(), hash_seed=3, observer=metrics)
    metrics.bind(limiter)
    admissions: list[Admission] = []
    for i in range(count + 2):
        admission = limiter.admit(
            RequestDigest(user=USERS[i % len(USERS)], verb="get" if i % 3 else "post")
        )
        try:
            admission.start()
        except Rejected:  # pragma: no cover - the queue holds them all
            raise AssertionError("rejected") from None
        admissions.append(admission)
    assert limiter.statistics().waiting_requests == count
    return limiter, registry, admissions


def _scrape_peak(registry: Any) -> tuple[int, bytes]:
    """The memory a scrape allocates at its peak, in bytes, and the scrape."""
    prometheus_client.generate_latest(registry)  # warm: families, imports, caches
    tracemalloc.start()
    try:
        text = prometheus_client.generate_latest(registry)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, text


@pytest.mark.parametrize("top_flows", [0, 5])
async def test_a_scrape_costs_the_same_with_3000_queued_requests_as_with_30(
    top_flows: int,
) -> None:
    # Deterministic: the memory a scrape allocates, not its time. Copying 3,000 waiting
    # requests into the dump took about 1 MB; counted by the engine, nothing of them is copied.
    small, small_text = _scrape_peak(_queued(30, top_flows)[1])
    large, large_text = _scrape_peak(_queued(3000, top_flows)[1])
    assert large < small * 1.3 + 8192, (small, large)
    # The same families and series; only the values differ.
    assert len(large_text.splitlines()) == len(small_text.splitlines())
    assert b'current_inqueue_requests{flow_schema="everyone",priority_level="test"} 3000.0' in (
        large_text
    )
    if top_flows:
        assert b'top_flow_waiting_requests{distinguisher="alice"' in large_text


def _read_peak(read: Callable[[], object]) -> tuple[int, object]:
    """The memory ``read()`` allocates at its peak, in bytes, and what it returned."""
    read()  # warm
    tracemalloc.start()
    try:
        value = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, value


@pytest.mark.parametrize(
    "read",
    [
        lambda limiter: dashboard_feed(limiter, top_flows=5),
        lambda limiter: dump_priority_levels(limiter).text(),
        lambda limiter: dump_queues(limiter).text(),
        lambda limiter: dump_top_flows(limiter).text(),
    ],
    ids=["dashboard_feed", "dump_priority_levels", "dump_queues", "dump_top_flows"],
)
async def test_the_dashboard_feed_and_the_count_dumps_cost_the_same_with_3000_queued(
    read: Callable[[Limiter], object],
) -> None:
    # The dashboard polls its feed every second: it, and the dumps that show counts only, must
    # not copy every waiting request as the full dump (``dump_requests``) does.
    small_limiter = _queued(30, top_flows=0)[0]
    large_limiter = _queued(3000, top_flows=0)[0]
    small, small_value = _read_peak(lambda: read(small_limiter))
    large, large_value = _read_peak(lambda: read(large_limiter))
    assert large < small * 1.3 + 8192, (small, large)
    assert type(large_value) is type(small_value)
    if isinstance(large_value, dict):  # the feed: the counts are right all the same
        (level,) = [level for level in large_value["priority_levels"] if level["name"] == "test"]
        assert level["waiting_requests"] == 3000 and level["longest_queue"] >= 1500
        assert {flow["distinguisher"] for flow in level["top_flows"]} == set(USERS)
        assert sum(flow["waiting_requests"] for flow in level["top_flows"]) == 3000


async def test_the_waiting_counts_follow_dispatch_time_outs_and_cancellations() -> None:
    limiter, registry, admissions = _queued(30, top_flows=5)

    def sample(name: str, **labels: str) -> float | None:
        value: float | None = registry.get_sample_value(f"apf_flowcontrol_{name}", labels)
        return value

    admissions[0].release()  # the next waiting request (alice's) is dispatched
    admissions[5].release()  # a waiting one of alice's leaves its queue
    pair = {"priority_level": "test", "flow_schema": "everyone"}
    assert sample("current_inqueue_requests", **pair) == 28
    assert sample("current_inqueue_seats", **pair) == 28
    top = {"priority_level": "test", "flow_schema": "everyone"}
    waiting = {
        user: sample("top_flow_waiting_requests", **top, distinguisher=user) for user in USERS
    }
    # As counted from the waiting requests themselves (a full dump): 28 = 30 less the one
    # dispatched and alice's that left.
    counted = Counter(
        request.distinguisher
        for level in limiter.dump().levels
        for queue in level.queues
        for request in queue.waiting
    )
    assert waiting == {user: float(counted[user]) for user in USERS}
    assert sum(counted.values()) == 28 and counted["alice"] <= 5
    # Everything still queued times out; nothing waits any more, and the gauges say so.
    assert isinstance(limiter.clock, FakeClock)
    await limiter.clock.advance(61)
    assert sample("current_inqueue_requests", **pair) == 0
    assert sample("top_flow_waiting_requests", **top, distinguisher="bob") is None
    for admission in admissions:
        admission.release()


def _servers() -> list[str]:
    # httptools lets a header grow to 1 MB by default; h11 only once told so (as below).
    return ["h11"] + (["httptools"] if importlib.util.find_spec("httptools") else [])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("http", _servers())
async def test_a_huge_header_distinguisher_does_not_make_a_huge_scrape(http: str) -> None:
    config = level_config(limit=4)
    config["flowSchemas"][0]["distinguisherMethod"] = {"type": "ByHeader", "header": "x-tenant"}
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry, top_flows=5)
    limiter = Limiter(config, observer=metrics)
    metrics.bind(limiter)
    release = asyncio.Event()

    async def hold(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limited = APFMiddleware(hold, limiter=limiter)
    scrape = metrics_app(registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        route: Callable[[Scope, Receive, Send], Awaitable[None]]
        route = scrape if scope.get("path") == "/metrics" else limited
        await route(scope, receive, send)

    tenant = "t" * 65_536
    options: dict[str, Any] = {"http": http, "h11_max_incomplete_event_size": 1 << 20}
    options["lifespan"] = "off"
    async with serve(app, **options) as url, httpx.AsyncClient(timeout=10) as client:
        held = asyncio.create_task(client.get(f"{url}/work", headers={"x-tenant": tenant}))
        await wait_until(lambda: limiter.statistics().executing_requests == 1)
        response = await client.get(f"{url}/metrics")
        release.set()
        assert (await held).status_code == 200
    body = response.text
    assert response.status_code == 200
    line = next(line for line in body.splitlines() if "top_flow_seats_in_use{" in line)
    cut = f"{'t' * (MAX_CELL_WIDTH - len(CUT_MARK) - 6)}{CUT_MARK}{65_536 - 242})"
    assert f'distinguisher="{cut}"' in line
    assert max(map(len, body.splitlines())) < 2 * MAX_CELL_WIDTH + 200
    assert len(body) < 65_536, len(body)  # the whole scrape is smaller than the one header
