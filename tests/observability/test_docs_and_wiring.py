"""The metric reference in the docs, and the less common ways of wiring the metrics."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from apf_limiter import Limiter
from apf_limiter.observability import METRICS, PrometheusMetrics
from apf_limiter.testing import FakeClock
from tests.observability.scenario import Holder, scenario_config, user

DOCS = Path(__file__).resolve().parents[2] / "docs" / "observability.md"

# Every metric of upstream metrics/metrics.go (without the apiserver_flowcontrol_ prefix).
KUBERNETES_METRICS = {
    "rejected_requests_total", "dispatched_requests_total", "current_inqueue_requests",
    "current_inqueue_seats", "current_executing_requests", "current_executing_seats",
    "request_queue_length_after_enqueue", "request_wait_duration_seconds",
    "request_execution_seconds", "work_estimated_seats", "watch_count_samples",
    "request_dispatch_no_accommodation_total", "epoch_advance_total", "current_r", "dispatch_r",
    "latest_s", "next_s_bounds", "next_discounted_s_bounds", "nominal_limit_seats",
    "lower_limit_seats", "upper_limit_seats", "current_limit_seats", "demand_seats",
    "demand_seats_high_watermark", "demand_seats_average", "demand_seats_stdev",
    "demand_seats_smoothed", "target_seats", "seat_fair_frac", "priority_level_seat_utilization",
    "priority_level_request_utilization", "read_vs_write_current_requests",
}  # fmt: skip
# Ours, for shadow mode, (opt-in) the top flows and the adaptive server limit; documented
# beside the Kubernetes ones, marked as additions.
APF_LIMITER_METRICS = {
    "shadow_rejected_requests_total", "shadow_request_wait_duration_seconds",
    "shadow_dropped_twins_total", "priority_level_shadow", "top_flow_seats_in_use",
    "top_flow_waiting_requests", "top_flow_rejections",
    "adaptive_limit_seats", "adaptive_applied_limit_seats", "adaptive_min_limit_seats",
    "adaptive_max_limit_seats", "adaptive_baseline_seconds", "adaptive_latency_ratio",
    "adaptive_last_latency_seconds", "adaptive_updates_total", "adaptive_probes_total",
    "adaptive_probing",
}  # fmt: skip


def test_catalogue_covers_kubernetes_and_the_docs_table_covers_the_catalogue() -> None:
    assert {spec.name for spec in METRICS if spec.origin == "kubernetes"} == KUBERNETES_METRICS
    assert {spec.name for spec in METRICS if spec.origin == "apf_limiter"} == APF_LIMITER_METRICS
    text = DOCS.read_text()
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (counter|gauge|histogram)[^|]*\| ([^|]+) \|", text, flags=re.MULTILINE
    )
    documented = {name: (kind, re.sub(r"=`[a-z]+`", "", labels)) for name, kind, labels in rows}
    assert documented == {spec.name: (spec.kind, ", ".join(spec.labels) or "—") for spec in METRICS}
    # The additions are in a table of their own, after the Kubernetes ones.
    additions = text.split("### apf_limiter additions", 1)[1]
    assert all(f"| `{name}` |" in additions for name in APF_LIMITER_METRICS)
    assert all(f"| `{name}` |" not in additions for name in KUBERNETES_METRICS)
    assert "![The dashboard](dashboard.png)" in text
    assert (DOCS.parent / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_scrapes_only_read_from_another_thread() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(scenario_config(), clock=clock, observer=metrics)
    metrics.bind(limiter)
    holder = Holder(limiter, user("alice"))
    await clock.advance(0)
    adjustments = limiter.dump().statistics.adjustments
    await clock.advance(25)  # two borrowing adjustments fall due, not yet run (no call)
    values: list[float | None] = []
    thread = threading.Thread(
        target=lambda: values.append(
            registry.get_sample_value(
                "apf_flowcontrol_current_executing_requests",
                {"priority_level": "queued", "flow_schema": "queued-users"},
            )
        )
    )
    thread.start()
    thread.join()
    assert values == [1.0]
    assert limiter.dump().statistics.adjustments == adjustments  # another thread only reads
    # statistics() and dump() are pure reads.
    limiter.statistics()
    assert limiter.dump().statistics.adjustments == adjustments
    # A scrape on the limiter's own thread (its event loop's) runs the due work first, so that
    # a quiet server's metrics are up to date (issue 28, item 3).
    registry.get_sample_value("apf_flowcontrol_seat_fair_frac")
    assert limiter.dump().statistics.adjustments == adjustments + 2
    holder.release.set()
    await clock.advance(0)
    assert limiter.dump().statistics.adjustments == adjustments + 2


async def test_events_without_bind_and_reconfiguration_of_queuing() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(scenario_config(), clock=clock, observer=metrics)
    metrics.sample()  # not bound: nothing to sample
    holder = Holder(limiter, user("alice"))
    await clock.advance(0)
    labels = {"priority_level": "queued", "flow_schema": "queued-users"}
    assert registry.get_sample_value("apf_flowcontrol_dispatched_requests_total", labels) == 1
    assert registry.get_sample_value("apf_flowcontrol_current_limit_seats", {
        "priority_level": "queued"
    }) is None  # fmt: skip
    count = "apf_flowcontrol_request_queue_length_after_enqueue_count"
    assert registry.get_sample_value(count, labels) == 1
    holder.release.set()
    await clock.advance(0)
    # The level stops queuing: requests dispatched at once no longer see a queue.
    config = scenario_config()
    config["priorityLevels"][0]["limited"]["limitResponse"] = {"type": "Reject"}
    limiter.reconfigure(config)
    holder = Holder(limiter, user("bob"))
    await clock.advance(0)
    assert registry.get_sample_value("apf_flowcontrol_dispatched_requests_total", labels) == 2
    assert registry.get_sample_value(count, labels) == 1
    holder.release.set()
    await clock.advance(0)
