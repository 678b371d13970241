"""The debug endpoints and /metrics over ASGI: routing, formats and authorization."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from apf_limiter import Limiter
from apf_limiter.observability import DEBUG_PREFIX, PrometheusMetrics, debug_app, metrics_app
from apf_limiter.observability._asgi import Scope
from apf_limiter.testing import FakeClock
from tests.observability.scenario import Holder, scenario_config, user


def allow(scope: Scope) -> bool:
    return True


@pytest.fixture
async def busy() -> AsyncIterator[Limiter]:
    clock = FakeClock()
    limiter = Limiter(scenario_config(), clock=clock)
    holders = [Holder(limiter, user(name)) for name in ("alice", "bob", "carol", "dave", "erin")]
    await clock.advance(0)
    yield limiter
    for holder in holders:
        holder.release.set()
    await clock.advance(0)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://apf")


async def test_everything_is_denied_without_an_authorize_hook(busy: Limiter) -> None:
    async with client(debug_app(busy)) as http:
        for path in ("dump_priority_levels", "dump_queues", "dump_requests", "dashboard", ""):
            response = await http.get(f"{DEBUG_PREFIX}/{path}")
            assert response.status_code == 403, path
            assert response.text == "Forbidden\n"
        assert (await http.get(f"{DEBUG_PREFIX}/nothing-here")).status_code == 403


async def test_sync_and_async_hooks_decide_per_request(busy: Limiter) -> None:
    seen: list[str] = []

    async def only_admins(scope: Scope) -> bool:
        headers = dict(scope["headers"])
        seen.append(scope["path"])
        return headers.get(b"x-user") == b"admin"

    async with client(debug_app(busy, authorize=only_admins)) as http:
        url = f"{DEBUG_PREFIX}/dump_queues"
        assert (await http.get(url)).status_code == 403
        assert (await http.get(url, headers={"x-user": "admin"})).status_code == 200
    assert seen == [url, url]
    # Only True allows: a truthy non-boolean answer is a mistake, and denies.
    async with client(debug_app(busy, authorize=lambda scope: "yes")) as http:  # type: ignore[arg-type,return-value]
        assert (await http.get(f"{DEBUG_PREFIX}/dump_queues")).status_code == 403


async def test_dumps_in_text_and_json_at_the_full_path(busy: Limiter) -> None:
    async with client(debug_app(busy, authorize=allow)) as http:
        response = await http.get(f"{DEBUG_PREFIX}/dump_priority_levels")
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        lines = response.text.splitlines()
        assert lines[0].startswith("PriorityLevelName, ActiveQueues, IsIdle,")
        assert lines[3].split() == [
            "queued,",
            "1,",
            "false,",
            "false,",
            "2,",
            "2,",
            "2,",
            "1,",
            "0,",
            "0",
        ]
        response = await http.get(f"{DEBUG_PREFIX}/dump_priority_levels?format=json")
        assert response.headers["content-type"] == "application/json"
        assert response.json()[2]["WaitingRequests"] == 2
        plain = (await http.get(f"{DEBUG_PREFIX}/dump_requests")).text
        assert "UserName" not in plain and plain.count("\n") == 5
        detailed = await http.get(
            f"{DEBUG_PREFIX}/dump_requests?includeRequestDetails=1&format=json"
        )
        assert sorted(row["UserName"] for row in detailed.json()) == [
            "alice",
            "bob",
            "carol",
            "dave",
        ]
        # Any non-empty value asks for details (as Kubernetes); an empty one does not.
        assert (
            "UserName"
            in (await http.get(f"{DEBUG_PREFIX}/dump_requests?includeRequestDetails=no")).text
        )
        assert (
            "UserName"
            not in (await http.get(f"{DEBUG_PREFIX}/dump_requests?includeRequestDetails=")).text
        )
        queues = await http.get(f"{DEBUG_PREFIX}/dump_queues?format=json")
        assert queues.json()[0]["PendingRequests"] == 2
        index = await http.get(f"{DEBUG_PREFIX}/")
        assert "dump_priority_levels" in index.text
        assert (await http.get(f"{DEBUG_PREFIX}/nothing-here")).status_code == 404
        assert (await http.post(f"{DEBUG_PREFIX}/dump_queues")).status_code == 405
        head = await http.head(f"{DEBUG_PREFIX}/dump_queues")
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) > 0


async def test_dashboard_page_and_feed(busy: Limiter) -> None:
    async with client(debug_app(busy, authorize=allow)) as http:
        page = await http.get(f"{DEBUG_PREFIX}/dashboard")
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "<script>" in page.text and "fetch(feedUrl" in page.text
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'sha256-" in policy
        feed = (await http.get(f"{DEBUG_PREFIX}/dashboard?format=json")).json()
    assert feed["server_concurrency_limit"] == 3
    assert feed["waiting_requests"] == 2
    queued = next(level for level in feed["priority_levels"] if level["name"] == "queued")
    assert {
        key: queued[key]
        for key in (
            "nominal_limit",
            "lower_limit",
            "upper_limit",
            "current_limit",
            "executing_seats",
            "executing_requests",
            "waiting_requests",
            "queues",
            "queue_length_limit",
            "active_queues",
            "longest_queue",
        )
    } == {
        "nominal_limit": 2,
        "lower_limit": 2,
        "upper_limit": 5,
        "current_limit": 2,
        "executing_seats": 2,
        "executing_requests": 2,
        "waiting_requests": 2,
        "queues": 1,
        "queue_length_limit": 2,
        "active_queues": 1,
        "longest_queue": 2,
    }
    assert queued["rejected"] == {"queue-full": 1, "concurrency-limit": 0, "time-out": 0}
    assert queued["queue_lengths"] == [
        {"label": "0", "low": 0, "high": 0, "queues": 0},
        {"label": "1", "low": 1, "high": 1, "queues": 0},
        {"label": "2-3", "low": 2, "high": 3, "queues": 1},
    ]
    json.dumps(feed)  # plain JSON types only


async def test_works_under_a_starlette_mount_and_other_prefixes(busy: Limiter) -> None:
    app = Starlette(
        routes=[
            Mount(DEBUG_PREFIX, app=debug_app(busy, authorize=allow)),
            Mount("/apf", app=debug_app(busy)),
        ]
    )
    async with client(app) as http:
        response = await http.get(f"{DEBUG_PREFIX}/dump_queues?format=json")
        assert response.status_code == 200
        assert response.json()[0]["PriorityLevelName"] == "queued"
        assert (await http.get(f"{DEBUG_PREFIX}/dashboard")).status_code == 200
        assert (await http.get("/apf/dump_queues")).status_code == 403


async def test_lifespan_and_websocket_scopes() -> None:
    app = debug_app(Limiter(scenario_config(), clock=FakeClock()), authorize=allow)
    sent: list[dict[str, Any]] = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(dict(message))

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    sent.clear()
    await app({"type": "websocket", "path": DEBUG_PREFIX + "/dashboard"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1008}]


async def test_metrics_app_serves_the_registry_and_can_be_guarded(busy: Limiter) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.bind(busy)
    app = Starlette(routes=[Route("/metrics", metrics_app(registry))])
    async with client(app) as http:
        response = await http.get("/metrics")
        assert response.status_code == 200
        sample = 'current_inqueue_requests{flow_schema="queued-users",priority_level="queued"} 2.0'
        assert f"apf_flowcontrol_{sample}\n" in response.text
    guarded = metrics_app(registry, authorize=lambda scope: scope["headers"] == [])
    async with client(guarded) as http:
        assert (await http.get("/metrics")).status_code == 403
