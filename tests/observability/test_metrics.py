"""Prometheus metrics after scripted traffic in fake time: counts, gauges, labels, samplers."""

from __future__ import annotations

import asyncio
import sys

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.observability import METRICS, PrometheusMetrics
from apf_limiter.testing import FakeClock
from tests.observability.scenario import ADMIN, RITA, ROB, Holder, scenario_config, user

P = "apf_flowcontrol_"
Q = {"priority_level": "queued", "flow_schema": "queued-users"}
R = {"priority_level": "rejecting", "flow_schema": "rejecters"}
E = {"priority_level": "exempt", "flow_schema": "exempt"}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(P + name, labels)


class Traffic:
    """The scripted scenario: alice and bob run at ``queued`` (2 seats), carol and dave wait,
    erin finds the queue full; rita runs at ``rejecting`` (1 seat), rob is rejected; the admin
    runs exempt. At t=3 alice leaves and carol starts; at t=6 dave times out (5 s limit); at
    t=7 everyone leaves."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.metrics = PrometheusMetrics(self.registry)
        self.limiter = Limiter(
            scenario_config(wait_limit=5), clock=self.clock, observer=self.metrics
        )
        self.metrics.bind(self.limiter)
        self.holders: dict[str, Holder] = {}

    def arrive(self, name: str, digest: RequestDigest | None = None) -> None:
        self.holders[name] = Holder(self.limiter, digest or user(name))

    async def until(self, when: float) -> None:
        await self.clock.advance_to(when)

    async def run_to_waiting(self) -> None:
        self.arrive("alice")
        self.arrive("bob")
        await self.until(1)
        self.arrive("carol")
        self.arrive("dave")
        self.arrive("erin")
        await self.until(2)
        self.arrive("rita", RITA)
        self.arrive("rob", ROB)
        self.arrive("admin", ADMIN)
        await self.until(2.5)

    async def run_to_end(self) -> None:
        await self.until(3)
        self.holders["alice"].release.set()
        await self.until(7)
        for holder in self.holders.values():
            holder.release.set()
        await self.clock.advance(0)
        await asyncio.gather(*(h.task for h in self.holders.values()))


async def test_counters_and_histograms_after_scripted_traffic() -> None:
    traffic = Traffic()
    await traffic.run_to_waiting()
    await traffic.run_to_end()
    reg = traffic.registry
    reasons = [traffic.holders[name].rejected for name in ("erin", "rob", "dave")]
    assert [r.reason if r else None for r in reasons] == [
        "queue-full",
        "concurrency-limit",
        "time-out",
    ]
    rejected = {
        (labels["priority_level"], labels["reason"]): sample.value
        for family in reg.collect()
        if family.name == P + "rejected_requests"
        for sample in family.samples
        if (labels := sample.labels)
    }
    assert rejected == {
        ("queued", "queue-full"): 1.0,
        ("queued", "time-out"): 1.0,
        ("rejecting", "concurrency-limit"): 1.0,
    }
    assert sum(rejected.values()) == 3
    assert value(reg, "dispatched_requests_total", **Q) == 3  # alice, bob, carol
    assert value(reg, "dispatched_requests_total", **R) == 1
    assert value(reg, "dispatched_requests_total", **E) == 1
    # Wait: dispatched and timed-out waits say execute="true" (the Kubernetes quirk), waits
    # rejected on arrival say "false"; exempt requests are not observed.
    wait = "request_wait_duration_seconds_"
    assert value(reg, wait + "count", **Q, execute="true") == 4
    assert value(reg, wait + "sum", **Q, execute="true") == 2 + 5
    assert value(reg, wait + "bucket", **Q, execute="true", le="0.0") == 2
    assert value(reg, wait + "bucket", **Q, execute="true", le="2.0") == 3
    assert value(reg, wait + "bucket", **Q, execute="true", le="5.0") == 4
    assert value(reg, wait + "count", **Q, execute="false") == 1
    assert value(reg, wait + "count", **R, execute="true") == 1
    assert value(reg, wait + "count", **R, execute="false") == 1
    assert value(reg, wait + "count", **E, execute="true") is None
    execution = "request_execution_seconds_"
    assert value(reg, execution + "count", **Q, type="regular") == 3
    assert value(reg, execution + "sum", **Q, type="regular") == 3 + 7 + 4
    assert value(reg, execution + "bucket", **Q, type="regular", le="5.0") == 2
    assert value(reg, execution + "sum", **E, type="regular") == 5
    assert value(reg, "work_estimated_seats_count", **Q) == 5
    assert value(reg, "work_estimated_seats_bucket", **Q, le="1.0") == 5
    # Every request that went through the queue saw its length: 1 for alice, bob and carol,
    # 2 for dave; erin was rejected before joining it.
    assert value(reg, "request_queue_length_after_enqueue_count", **Q) == 4
    assert value(reg, "request_queue_length_after_enqueue_sum", **Q) == 5
    assert value(reg, "request_queue_length_after_enqueue_count", **R) is None


async def test_per_flow_gauges_follow_the_queues_and_return_to_zero() -> None:
    traffic = Traffic()
    await traffic.run_to_waiting()
    reg = traffic.registry
    assert value(reg, "current_inqueue_requests", **Q) == 2
    assert value(reg, "current_inqueue_seats", **Q) == 2
    assert value(reg, "current_executing_requests", **Q) == 2
    assert value(reg, "current_executing_seats", **Q) == 2
    assert value(reg, "current_executing_requests", **R) == 1
    assert value(reg, "current_executing_requests", **E) == 1
    await traffic.run_to_end()
    for labels in (Q, R, E):
        for name in ("inqueue_requests", "inqueue_seats", "executing_requests", "executing_seats"):
            assert value(reg, "current_" + name, **labels) == 0, (name, labels)


async def test_limits_and_progress_meters_are_read_at_scrape_time() -> None:
    traffic = Traffic()
    await traffic.run_to_waiting()
    reg = traffic.registry
    level = {"priority_level": "queued"}
    assert value(reg, "nominal_limit_seats", **level) == 2
    assert value(reg, "lower_limit_seats", **level) == 2
    assert value(reg, "upper_limit_seats", **level) == 2 + 3  # borrowing limit = ServerCL
    assert value(reg, "current_limit_seats", **level) == 2
    assert value(reg, "nominal_limit_seats", priority_level="exempt") == 0
    assert value(reg, "seat_fair_frac") == traffic.limiter.statistics().fair_fraction
    # R ran at 2 seats/s from 0 to 1 (one active queue); carol's arrival at R=2 bounds the
    # queue's next dispatch; the discount is 2 seats in use x 3 ms.
    assert value(reg, "current_r", **level) == 2.0
    assert value(reg, "next_s_bounds", **level, bound="min") == 2.0
    assert value(reg, "next_s_bounds", **level, bound="max") == 2.0
    assert value(reg, "next_discounted_s_bounds", **level, bound="min") == 1.994
    assert value(reg, "epoch_advance_total", **level, success="true") == 0
    assert value(reg, "demand_seats_high_watermark", **level) == 0  # no adjustment yet
    await traffic.until(10)  # the borrowing adjustment at t=10 sees the whole period
    assert value(reg, "demand_seats_high_watermark", **level) == 4  # 2 running + 2 waiting
    assert value(reg, "demand_seats_average", **level) == pytest.approx(3.0)
    await traffic.run_to_end()


async def test_ratio_histograms_are_sampled_in_seconds() -> None:
    traffic = Traffic()
    await traffic.run_to_waiting()
    reg = traffic.registry
    level = {"priority_level": "queued"}
    # First scrape at t=2.5: demand (2 running + 2 waiting) / 2 seats = 2.0, weighted 2.5 s.
    assert value(reg, "demand_seats_bucket", **level, le="1.7") == 0
    assert value(reg, "demand_seats_bucket", **level, le="2.0") == 2.5
    assert value(reg, "demand_seats_sum", **level) == 5.0
    await traffic.until(3)
    traffic.holders["alice"].release.set()
    await traffic.until(3.5)
    # t=3.5: carol runs, dave waits: 3/2 = 1.5 for the last second.
    assert value(reg, "demand_seats_bucket", **level, le="1.7") == 1.0
    assert value(reg, "demand_seats_count", **level) == 3.5
    assert value(reg, "demand_seats_sum", **level) == 6.5
    assert (
        value(reg, "priority_level_seat_utilization_bucket", **level, phase="executing", le="1.0")
        == 3.5
    )
    waiting = {"phase": "waiting", "priority_level": "queued"}
    # Waiting requests / (queue length limit 2 x 1 queue): 2/2 for 2.5 s, then 1/2 for 1 s.
    assert value(reg, "priority_level_request_utilization_bucket", **waiting, le="0.25") == 0
    assert value(reg, "priority_level_request_utilization_bucket", **waiting, le="0.5") == 1.0
    assert value(reg, "priority_level_request_utilization_bucket", **waiting, le="1.0") == 3.5
    assert (
        value(
            reg, "read_vs_write_current_requests_count", phase="executing", request_kind="readOnly"
        )
        == 3.5
    )
    # An explicit sample adds detail between scrapes.
    await traffic.until(4)
    traffic.metrics.sample()
    assert value(reg, "demand_seats_count", **level) == 4.0
    await traffic.run_to_end()


async def test_cancelled_wait_counts_as_time_out() -> None:
    traffic = Traffic()
    traffic.arrive("alice")
    traffic.arrive("bob")
    traffic.arrive("carol")
    await traffic.until(1)
    traffic.holders["carol"].task.cancel()
    await traffic.until(1.5)
    reg = traffic.registry
    assert value(reg, "rejected_requests_total", **Q, reason="time-out") == 1
    assert value(reg, "request_wait_duration_seconds_sum", **Q, execute="true") == 1.0
    assert value(reg, "current_inqueue_requests", **Q) == 0
    for name in ("alice", "bob"):
        traffic.holders[name].release.set()
    await asyncio.gather(*(h.task for h in traffic.holders.values()), return_exceptions=True)


def test_every_kubernetes_metric_is_exported_under_the_namespace() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, namespace="apiserver")
    limiter = Limiter(scenario_config(), clock=FakeClock(), observer=metrics)
    metrics.bind(limiter)
    text = generate_latest(registry).decode()
    for spec in METRICS:
        if spec.name.startswith("adaptive_"):
            continue  # only with adaptiveConcurrency on (test_adaptive.py)
        assert f"# TYPE apiserver_flowcontrol_{spec.name} {spec.kind}\n" in text, spec.name
    assert len(METRICS) == 32 + 4 + 3 + 10  # Kubernetes', shadow's, top flows', adaptive's
    assert "apf_flowcontrol" not in text


def test_registry_is_injectable_and_names_clash_once() -> None:
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    with pytest.raises(ValueError, match="one PrometheusMetrics per registry"):
        PrometheusMetrics(registry)
    PrometheusMetrics(registry, namespace="other")  # another prefix is fine
    default = PrometheusMetrics(subsystem="")
    try:
        assert default.registry is REGISTRY
        assert default.prefix == "apf_"
    finally:
        default.unregister()


def test_missing_prometheus_client_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install 'apf_limiter\[prometheus\]'"):
        PrometheusMetrics(CollectorRegistry())
