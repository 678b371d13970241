"""Who is flooding: the top flows of each level in the dump, the dashboard feed and metrics."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from apf_limiter import Admission, Limiter, Rejected, RequestDigest
from apf_limiter.observability import (
    DEBUG_PREFIX,
    PrometheusMetrics,
    dashboard_feed,
    debug_app,
    dump_top_flows,
)
from apf_limiter.observability._asgi import Scope
from apf_limiter.observability._debug_text import CUT_MARK, MAX_CELL_WIDTH
from apf_limiter.testing import FakeClock
from tests.observability.scenario import scenario_config, user

HEADER = (
    "PriorityLevelName, FlowSchemaName, FlowDistinguisher, SeatsInUse, WaitingRequests, "
    "RejectedLastMinute\n"
)


def hashed(value: str, key: bytes = b"") -> str:
    return "#" + hashlib.blake2b(value.encode(), digest_size=6, key=key).hexdigest()


def allow(scope: Scope) -> bool:
    return True


def admit(limiter: Limiter, digest: RequestDigest, admissions: list[Admission]) -> None:
    admission = limiter.admit(digest)
    try:
        admission.start()
    except Rejected:
        return
    admissions.append(admission)


@pytest.fixture
async def flooded() -> AsyncIterator[Limiter]:
    """``queued`` (20 seats, 8 queues, hands of 2, queues of 2): alice holds 12 seats, bob 8;
    mallory fills both queues of her hand (4 waiting) and is rejected 3 times; carol waits."""
    clock = FakeClock()
    config = scenario_config(
        queues=8, hand_size=2, distinguisher=True, queue_length_limit=2, server_limit=30
    )
    limiter = Limiter(config, clock=clock, hash_seed=7)
    admissions: list[Admission] = []
    for name, count in (("alice", 12), ("bob", 8), ("mallory", 7), ("carol", 1)):
        for _ in range(count):
            admit(limiter, user(name), admissions)
    yield limiter
    for admission in admissions:
        admission.release()


async def test_the_dump_names_who_holds_waits_and_is_rejected(flooded: Limiter) -> None:
    dump = dump_top_flows(flooded)
    assert dump.text() == HEADER + (
        "queued,            queued-users,   alice,             12,         0,               0\n"
        "queued,            queued-users,   bob,               8,          0,               0\n"
        "queued,            queued-users,   mallory,           0,          4,               3\n"
        "queued,            queued-users,   carol,             0,          1,               0\n"
    )
    assert dump.json_rows()[2] == {
        "PriorityLevelName": "queued",
        "FlowSchemaName": "queued-users",
        "FlowDistinguisher": "mallory",
        "SeatsInUse": 0,
        "WaitingRequests": 4,
        "RejectedLastMinute": 3,
    }


async def test_top_n_bounds_each_ranking(flooded: Limiter) -> None:
    # The top 1 by seats (alice), by waiting and by rejections (mallory both): two rows.
    rows = dump_top_flows(flooded, top=1).json_rows()
    assert [row["FlowDistinguisher"] for row in rows] == ["alice", "mallory"]
    assert dump_top_flows(flooded, top=0).rows == ()


async def test_distinguishers_can_be_shown_as_short_stable_hashes(flooded: Limiter) -> None:
    text = dump_top_flows(flooded, top=1, hash_distinguishers=True).text()
    assert hashed("alice") in text and hashed("mallory") in text
    assert "alice" not in text and "mallory" not in text
    keyed = dump_top_flows(flooded, top=1, hash_distinguishers=b"fleet secret").json_rows()
    assert [row["FlowDistinguisher"] for row in keyed] == [
        hashed("alice", b"fleet secret"),
        hashed("mallory", b"fleet secret"),
    ]
    for bad in (b"", b"k" * 65, "text"):
        with pytest.raises(ValueError, match="hash_distinguishers"):
            dump_top_flows(flooded, hash_distinguishers=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top"):
        dump_top_flows(flooded, top=101)


async def test_client_chosen_distinguishers_are_escaped_and_cut() -> None:
    from tests.helpers import single_level_config

    clock = FakeClock()
    limiter = Limiter(
        single_level_config(limit=1, queues=4, hand_size=2, queue_length_limit=1),
        clock=clock,
        hash_seed=1,
    )
    hostile = "evil,\tFAKE\nexempt\x1b[2J" + "x" * 1000
    admissions: list[Admission] = []
    for _ in range(4):
        admit(limiter, RequestDigest(user=hostile, groups=("system:authenticated",)), admissions)
    dump = dump_top_flows(limiter)
    lines = dump.text().splitlines()
    assert len(lines) == 2
    assert "\t" not in lines[1] and "\x1b" not in lines[1]
    assert "evil,\\tFAKE\\nexempt\\x1b[2J" in lines[1] and CUT_MARK in lines[1]
    assert len(lines[1]) < 2 * MAX_CELL_WIDTH
    assert dump.json_rows()[0]["FlowDistinguisher"] == hostile
    for admission in admissions:
        admission.release()


async def test_many_flows_still_give_a_bounded_table() -> None:
    clock = FakeClock()
    config = scenario_config(
        queues=64, hand_size=4, distinguisher=True, queue_length_limit=5, server_limit=30
    )
    limiter = Limiter(config, clock=clock, hash_seed=2)
    admissions: list[Admission] = []
    for index in range(2000):
        admit(limiter, user(f"client-{index}"), admissions)
    rows = dump_top_flows(limiter, top=3).rows
    assert 3 <= len(rows) <= 9
    for admission in admissions:
        admission.release()


async def test_the_dashboard_feed_and_the_endpoint(flooded: Limiter) -> None:
    feed = dashboard_feed(flooded, top_flows=1)
    queued = next(level for level in feed["priority_levels"] if level["name"] == "queued")
    assert queued["top_flows"] == [
        {
            "flow_schema": "queued-users",
            "distinguisher": "alice",
            "seats_in_use": 12,
            "waiting_requests": 0,
            "rejections": 0,
        },
        {
            "flow_schema": "queued-users",
            "distinguisher": "mallory",
            "seats_in_use": 0,
            "waiting_requests": 4,
            "rejections": 3,
        },
    ]
    app = debug_app(flooded, authorize=allow, top_flows=2, hash_distinguishers=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://apf") as http:
        text = (await http.get(f"{DEBUG_PREFIX}/dump_top_flows")).text
        assert text.startswith(HEADER) and len(text.splitlines()) == 1 + 4
        assert "mallory" not in text and hashed("mallory") in text
        rows = (await http.get(f"{DEBUG_PREFIX}/dump_top_flows?top=1&format=json")).json()
        assert [row["FlowDistinguisher"] for row in rows] == [hashed("alice"), hashed("mallory")]
        feed = (await http.get(f"{DEBUG_PREFIX}/dashboard?format=json")).json()
        names = {
            flow["distinguisher"]
            for level in feed["priority_levels"]
            for flow in level["top_flows"]
        }
        assert names == {hashed(name) for name in ("alice", "bob", "mallory", "carol")}
        assert "dump_top_flows" in (await http.get(f"{DEBUG_PREFIX}/")).text
    with pytest.raises(ValueError, match="top_flows"):
        debug_app(flooded, authorize=allow, top_flows=-1)


async def test_a_shadow_level_is_marked(flooded: Limiter) -> None:
    clock = FakeClock()
    config = {
        **scenario_config(queue_length_limit=1, wait_limit=60, server_limit=30),
        "priorityLevelEnforcement": {"queued": "Shadow"},
    }
    limiter = Limiter(config, clock=clock)
    admissions: list[Admission] = []
    for index in range(22):
        admit(limiter, user(f"user-{index % 2}"), admissions)
    rows = dump_top_flows(limiter, top=1).json_rows()
    # Twins: what enforcing would do (a single-queue level: the flow is its schema).
    assert rows == [
        {
            "PriorityLevelName": "queued",
            "FlowSchemaName": "queued-users",
            "FlowDistinguisher": "",
            "SeatsInUse": 20,
            "WaitingRequests": 1,
            "RejectedLastMinute": 1,
            "Enforcement": "Shadow",
        }
    ]
    for admission in admissions:
        admission.release()


def sample(registry: CollectorRegistry, name: str, level: str, who: str) -> float | None:
    labels = {"priority_level": level, "flow_schema": "queued-users", "distinguisher": who}
    return registry.get_sample_value(f"apf_flowcontrol_{name}", labels)


async def test_metrics_are_opt_in_and_only_the_top_n(flooded: Limiter) -> None:
    off = CollectorRegistry()
    PrometheusMetrics(off).bind(flooded)
    # Off by default: the families are there (as every metric is), with no series.
    off_families = [m for m in off.collect() if m.name.startswith("apf_flowcontrol_top_flow")]
    assert len(off_families) == 3
    assert all(not family.samples for family in off_families)

    registry = CollectorRegistry()
    PrometheusMetrics(registry, top_flows=1).bind(flooded)
    families = {m.name: m for m in registry.collect() if "top_flow" in m.name}
    assert {name: len(family.samples) for name, family in families.items()} == {
        "apf_flowcontrol_top_flow_seats_in_use": 1,
        "apf_flowcontrol_top_flow_waiting_requests": 1,
        "apf_flowcontrol_top_flow_rejections": 1,
    }
    assert sample(registry, "top_flow_seats_in_use", "queued", "alice") == 12
    assert sample(registry, "top_flow_seats_in_use", "queued", "bob") is None  # not top 1
    assert sample(registry, "top_flow_waiting_requests", "queued", "mallory") == 4
    assert sample(registry, "top_flow_rejections", "queued", "mallory") == 3

    private = CollectorRegistry()
    PrometheusMetrics(private, top_flows=2, hash_distinguishers=b"k").bind(flooded)
    assert sample(private, "top_flow_rejections", "queued", hashed("mallory", b"k")) == 3
    with pytest.raises(ValueError, match="top_flows"):
        PrometheusMetrics(CollectorRegistry(), top_flows=1000)


async def test_dump_requests_hides_distinguishers_and_users_as_dump_top_flows_does(
    flooded: Limiter,
) -> None:
    from apf_limiter.observability import dump_requests

    plain = dump_requests(flooded, include_details=True).json_rows()
    assert {row["FlowDistingsher"] for row in plain} >= {"alice", "mallory"}
    for key, option in ((b"", True), (b"fleet secret", b"fleet secret")):
        rows = dump_requests(flooded, include_details=True, hash_distinguishers=option).json_rows()
        assert len(rows) == len(plain)
        names = {row["FlowDistingsher"] for row in rows}
        assert names == {hashed(name, key) for name in ("alice", "bob", "mallory", "carol")}
        assert {row["UserName"] for row in rows} == names  # the user is the distinguisher here
        text = dump_requests(flooded, hash_distinguishers=option).text()
        assert "alice" not in text and "mallory" not in text
    # The same flow reads the same in both dumps.
    top = {
        row["FlowDistinguisher"]
        for row in dump_top_flows(flooded, hash_distinguishers=True).json_rows()
    }
    assert top <= {
        row["FlowDistingsher"]
        for row in dump_requests(flooded, hash_distinguishers=True).json_rows()
    }
    with pytest.raises(ValueError, match="hash_distinguishers"):
        dump_requests(flooded, hash_distinguishers=b"x" * 65)


async def test_the_middleware_passes_debug_options_to_every_endpoint(flooded: Limiter) -> None:
    from apf_limiter.asgi import APFMiddleware
    from apf_limiter.asgi._types import Receive, Send

    async def never(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("not reached: debug paths bypass the app")

    middleware = APFMiddleware(
        never,
        limiter=flooded,
        debug_endpoints={"top_flows": 1, "hash_distinguishers": True},
        authorize=allow,
    )
    transport = httpx.ASGITransport(app=middleware)
    async with httpx.AsyncClient(transport=transport, base_url="http://apf") as http:
        rows = (await http.get(f"{DEBUG_PREFIX}/dump_top_flows?format=json")).json()
        assert [row["FlowDistinguisher"] for row in rows] == [hashed("alice"), hashed("mallory")]
        text = (await http.get(f"{DEBUG_PREFIX}/dump_requests?includeRequestDetails=1")).text
        assert hashed("carol") in text and "carol" not in text.replace(hashed("carol"), "")
    with pytest.raises(TypeError, match="unknown options"):
        APFMiddleware(never, limiter=flooded, debug_endpoints={"top": 1})
    with pytest.raises(ValueError, match="top_flows"):
        APFMiddleware(never, limiter=flooded, debug_endpoints={"top_flows": -1})
