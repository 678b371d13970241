"""Shadow mode in the observability tools: its own metrics, the dumps' column, the feed."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from apf_limiter import Limiter, RequestDigest
from apf_limiter.observability import (
    METRICS,
    PrometheusMetrics,
    dashboard_feed,
    dump_priority_levels,
)
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config
from tests.observability.scenario import RITA, ROB, Holder, scenario_config, user

P = "apf_flowcontrol_"
Q = {"priority_level": "queued", "flow_schema": "queued-users"}
R = {"priority_level": "rejecting", "flow_schema": "rejecters"}
SHADOW_METRICS = {
    "shadow_rejected_requests_total",
    "shadow_request_wait_duration_seconds",
    "shadow_dropped_twins_total",
    "priority_level_shadow",
}


def shadow_config(**shape: Any) -> dict[str, Any]:
    """The scenario with ``queued`` and ``rejecting`` in shadow mode, ``catch-all`` enforced."""
    return {
        **scenario_config(**shape),
        "priorityLevelEnforcement": {"queued": "Shadow", "rejecting": "Shadow"},
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(P + name, labels)


class ShadowTraffic:
    """The overload of test_metrics.Traffic, in shadow mode: everyone runs at once.

    Enforced, alice and bob would run at ``queued`` (2 seats), carol and dave would wait,
    erin would find the queue full; rita would run at ``rejecting`` (1 seat) and rob be
    rejected. At t=3 alice leaves (carol's twin starts: a 2 s wait); at t=6 dave's twin
    times out (5 s limit); at t=7 everyone leaves.
    """

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.metrics = PrometheusMetrics(self.registry)
        self.limiter = Limiter(shadow_config(wait_limit=5), clock=self.clock, observer=self.metrics)
        self.metrics.bind(self.limiter)
        self.holders: dict[str, Holder] = {}

    def arrive(self, name: str, digest: RequestDigest | None = None) -> None:
        self.holders[name] = Holder(self.limiter, digest or user(name))

    async def run_to_waiting(self) -> None:
        self.arrive("alice")
        self.arrive("bob")
        await self.clock.advance_to(1)
        for name in ("carol", "dave", "erin"):
            self.arrive(name)
        await self.clock.advance_to(2)
        self.arrive("rita", RITA)
        self.arrive("rob", ROB)
        await self.clock.advance_to(2.5)

    async def run_to_end(self) -> None:
        await self.clock.advance_to(3)
        self.holders["alice"].release.set()
        await self.clock.advance_to(7)
        for holder in self.holders.values():
            holder.release.set()
        await self.clock.advance_to(20)  # the twins run as long as their requests did
        await asyncio.gather(*(h.task for h in self.holders.values()))


async def test_would_be_rejections_and_waits_have_metrics_of_their_own() -> None:
    traffic = ShadowTraffic()
    await traffic.run_to_waiting()
    await traffic.run_to_end()
    reg = traffic.registry
    assert all(h.entered and h.rejected is None for h in traffic.holders.values())
    rejected = "shadow_rejected_requests_total"
    assert value(reg, rejected, **Q, reason="queue-full") == 1  # erin
    assert value(reg, rejected, **Q, reason="time-out") == 1  # dave
    assert value(reg, rejected, **Q, reason="concurrency-limit") is None
    assert value(reg, rejected, **R, reason="concurrency-limit") == 1  # rob
    # Would-be waits of the requests enforcing would have run: alice and bob at once,
    # carol after 2 s; at rejecting, rita at once.
    wait = "shadow_request_wait_duration_seconds_"
    assert value(reg, wait + "count", **Q) == 3
    assert value(reg, wait + "sum", **Q) == 2.0
    assert value(reg, wait + "bucket", **Q, le="0.0") == 2
    assert value(reg, wait + "bucket", **Q, le="1.0") == 2
    assert value(reg, wait + "bucket", **Q, le="2.0") == 3
    assert value(reg, wait + "count", **R) == 1
    assert value(reg, "shadow_dropped_twins_total", **Q) == 0
    # The Kubernetes counters describe the real requests: all dispatched at once, none
    # rejected, none waited.
    assert value(reg, "dispatched_requests_total", **Q) == 5
    assert value(reg, "dispatched_requests_total", **R) == 2
    for labels in (Q, R):
        for reason in ("queue-full", "concurrency-limit", "time-out"):
            assert value(reg, "rejected_requests_total", **labels, reason=reason) is None
    assert value(reg, "request_wait_duration_seconds_sum", **Q, execute="true") == 0.0
    assert value(reg, "request_wait_duration_seconds_count", **Q, execute="true") == 5


async def test_engine_gauges_show_the_twins_and_a_gauge_names_the_shadow_levels() -> None:
    traffic = ShadowTraffic()
    await traffic.run_to_waiting()
    reg = traffic.registry
    # Five requests run at queued, but the gauges show what enforcing would do: 2 twins
    # holding the level's 2 seats, 2 waiting.
    assert value(reg, "current_executing_requests", **Q) == 2
    assert value(reg, "current_inqueue_requests", **Q) == 2
    shadow = {
        level.name: value(reg, "priority_level_shadow", priority_level=level.name)
        for level in traffic.limiter.dump().levels
    }
    assert shadow == {"exempt": 0.0, "queued": 1.0, "rejecting": 1.0, "catch-all": 0.0}
    # Flipped live by a reconfiguration.
    traffic.limiter.reconfigure(scenario_config(wait_limit=5))
    assert value(reg, "priority_level_shadow", priority_level="queued") == 0.0
    await traffic.run_to_end()


async def test_twins_dropped_by_the_cap_are_counted() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    config = {**single_level_config(limit=1, queue_length_limit=5), "enforcement": "Shadow"}
    limiter = Limiter(config, clock=clock, observer=metrics, max_shadow_twins=0)
    metrics.bind(limiter)
    first, second, third = (limiter.admit(RequestDigest(user=name)) for name in "abc")
    for admission in (first, second, third):
        assert admission.start()
    await clock.advance(0.5)
    third.release()  # its twin still waits, and no twin may outlive its request: dropped
    await clock.advance(0.5)
    first.release()  # the second's twin starts after 1 s
    await clock.advance(0.5)
    second.release()  # its twin, running, is ended early: its wait was counted, once
    labels = {"priority_level": "test", "flow_schema": "test"}
    # Each request counts once: the third as dropped, the first and the second as waits.
    assert value(registry, "shadow_dropped_twins_total", **labels) == 1
    assert value(registry, "shadow_request_wait_duration_seconds_sum", **labels) == 1.0
    assert value(registry, "shadow_request_wait_duration_seconds_count", **labels) == 2
    assert value(registry, "shadow_rejected_requests_total", **labels, reason="dropped") is None
    assert value(registry, "current_executing_requests", **labels) == 0


def test_the_additions_are_catalogued_apart_from_the_kubernetes_metrics() -> None:
    additions = {
        spec.name: spec
        for spec in METRICS
        if spec.origin == "apf_limiter" and not spec.name.startswith("adaptive_")
    }
    top_flows = {"top_flow_seats_in_use", "top_flow_waiting_requests", "top_flow_rejections"}
    assert set(additions) == SHADOW_METRICS | top_flows
    assert additions["shadow_rejected_requests_total"].labels == (
        "priority_level",
        "flow_schema",
        "reason",
    )
    kubernetes_wait = next(s for s in METRICS if s.name == "request_wait_duration_seconds")
    assert additions["shadow_request_wait_duration_seconds"].buckets == kubernetes_wait.buckets
    assert additions["priority_level_shadow"].source == "scrape"


async def test_dump_priority_levels_adds_an_enforcement_column_only_in_shadow_mode() -> None:
    clock = FakeClock()
    limiter = Limiter(shadow_config(), clock=clock)
    holders = [Holder(limiter, user(name)) for name in ("alice", "bob", "carol", "dave", "erin")]
    await clock.advance(0)
    dump = dump_priority_levels(limiter)
    # The numbers of a shadow level are its twins': 2 running, 2 waiting, 1 queue-full.
    assert dump.text() == (
        "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, "
        "ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, "
        "CancelledRequests, Enforcement\n"
        "catch-all,         0,            true,   false,       0,               "
        "0,                 0,                  0,                0,                0,"
        "                 Enforce\n"
        "exempt,            0,            true,   false,       0,               "
        "0,                 0,                  0,                0,                0,"
        "                 Enforce\n"
        "queued,            1,            false,  false,       2,               "
        "2,                 2,                  1,                0,                0,"
        "                 Shadow\n"
        "rejecting,         0,            true,   false,       0,               "
        "0,                 0,                  0,                0,                0,"
        "                 Shadow\n"
    )
    rows = {row["PriorityLevelName"]: row for row in dump.json_rows()}
    assert rows["queued"]["Enforcement"] == "Shadow"
    assert rows["catch-all"]["Enforcement"] == "Enforce"
    assert list(rows["queued"])[-1] == "Enforcement"
    assert all(h.entered for h in holders)
    # Back to enforcing everywhere: the Kubernetes columns exactly, nothing added.
    limiter.reconfigure(scenario_config())
    enforced = dump_priority_levels(limiter)
    assert enforced.columns[-1] == "CancelledRequests"
    assert "Enforcement" not in enforced.text()
    assert all("Enforcement" not in row for row in enforced.json_rows())
    for holder in holders:
        holder.release.set()
    await clock.advance(30)


async def test_the_dashboard_feed_says_which_levels_are_in_shadow_mode() -> None:
    clock = FakeClock()
    limiter = Limiter(shadow_config(), clock=clock)
    holders = [Holder(limiter, user(name)) for name in ("alice", "bob", "carol")]
    await clock.advance(0)
    feed = dashboard_feed(limiter)
    assert feed["shadow_levels"] == ["queued", "rejecting"]
    levels = {level["name"]: level for level in feed["priority_levels"]}
    assert {name: level["shadow"] for name, level in levels.items()} == {
        "exempt": False,
        "queued": True,
        "rejecting": True,
        "catch-all": False,
    }
    # Three requests run; the feed shows what enforcing would do: 2 running, 1 waiting.
    assert (levels["queued"]["executing_requests"], levels["queued"]["waiting_requests"]) == (2, 1)
    limiter.reconfigure(scenario_config())
    assert dashboard_feed(limiter)["shadow_levels"] == []
    for holder in holders:
        holder.release.set()
    await clock.advance(30)


async def test_would_be_rejections_have_series_at_zero_from_the_first_request() -> None:
    # The documented ratio query (would-be 429s over dispatched) must read 0, not "no data",
    # while nothing would have been rejected yet.
    traffic = ShadowTraffic()
    traffic.arrive("alice")
    traffic.arrive("rita", RITA)
    await traffic.clock.advance_to(1)
    reg = traffic.registry
    rejected = "shadow_rejected_requests_total"
    assert value(reg, rejected, **Q, reason="queue-full") == 0
    assert value(reg, rejected, **Q, reason="time-out") == 0
    assert value(reg, rejected, **Q, reason="concurrency-limit") is None  # a queuing level
    assert value(reg, rejected, **R, reason="concurrency-limit") == 0
    assert value(reg, rejected, **R, reason="queue-full") is None  # a Reject level
    assert value(reg, "dispatched_requests_total", **Q) == 1
    for holder in traffic.holders.values():
        holder.release.set()
    await traffic.clock.advance_to(2)
