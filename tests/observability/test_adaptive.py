"""The adaptive server limit in the metrics and the dashboard feed, in fake time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from apf_limiter import Limiter
from apf_limiter.observability import METRICS, PrometheusMetrics, dashboard_feed
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config
from tests.observability.scenario import adaptive_config, wave

P = "apf_flowcontrol_"
ADAPTIVE_METRICS = {
    "adaptive_limit_seats",
    "adaptive_applied_limit_seats",
    "adaptive_min_limit_seats",
    "adaptive_max_limit_seats",
    "adaptive_baseline_seconds",
    "adaptive_latency_ratio",
    "adaptive_last_latency_seconds",
    "adaptive_updates_total",
    "adaptive_probes_total",
    "adaptive_probing",
}


def scrape(registry: CollectorRegistry) -> dict[str, float | None]:
    """Every unlabelled adaptive gauge and counter, and the baseline of level ``test``."""
    names = ADAPTIVE_METRICS - {"adaptive_baseline_seconds"}
    values = {name: registry.get_sample_value(P + name) for name in names}
    values["baseline"] = registry.get_sample_value(
        P + "adaptive_baseline_seconds", {"priority_level": "test"}
    )
    return values


def test_the_adaptive_metrics_are_catalogued_as_additions_read_at_scrape_time() -> None:
    specs = {spec.name: spec for spec in METRICS if spec.name.startswith("adaptive_")}
    assert set(specs) == ADAPTIVE_METRICS
    assert {spec.origin for spec in specs.values()} == {"apf_limiter"}
    assert {spec.source for spec in specs.values()} == {"scrape"}
    assert specs["adaptive_baseline_seconds"].labels == ("priority_level",)
    assert specs["adaptive_updates_total"].kind == "counter"
    assert specs["adaptive_probes_total"].kind == "counter"


async def test_the_metrics_follow_the_learned_limit_at_each_scrape() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(adaptive_config(), clock=clock, observer=metrics)
    metrics.bind(limiter)
    # Before any update: the limit learning starts from, and no baseline yet.
    assert scrape(registry) == {
        "adaptive_limit_seats": 10.0,
        "adaptive_applied_limit_seats": 10.0,
        "adaptive_min_limit_seats": 2.0,
        "adaptive_max_limit_seats": 40.0,
        "adaptive_latency_ratio": 0.0,
        "adaptive_last_latency_seconds": 0.0,
        "adaptive_updates_total": 0.0,
        "adaptive_probes_total": 0.0,
        "adaptive_probing": 0.0,
        "baseline": None,
    }
    # Requests wait at their baseline latency: the first update (at 1 s) grows the limit.
    await wave(limiter, clock, 30, 0.1)
    await clock.advance_to(0.95)
    await wave(limiter, clock, 30, 0.1)
    grown = scrape(registry)
    assert grown["adaptive_applied_limit_seats"] == 12.0
    assert grown["adaptive_limit_seats"] == pytest.approx(12.0)
    assert grown["adaptive_updates_total"] == 1.0
    assert grown["adaptive_latency_ratio"] == pytest.approx(1.0)
    assert grown["baseline"] == pytest.approx(0.1)
    assert grown["adaptive_last_latency_seconds"] == pytest.approx(0.1)
    # Four times slower: the limit comes down, and the next scrape says so.
    for _ in range(3):
        await wave(limiter, clock, 30, 0.4)
    adaptive = limiter.adaptive_concurrency
    assert adaptive is not None
    assert adaptive.applied_limit < 12
    assert scrape(registry) == {
        "adaptive_limit_seats": adaptive.limit,
        "adaptive_applied_limit_seats": adaptive.applied_limit,
        "adaptive_min_limit_seats": 2.0,
        "adaptive_max_limit_seats": 40.0,
        "adaptive_latency_ratio": adaptive.last_ratio,
        "adaptive_last_latency_seconds": pytest.approx(0.4),
        "adaptive_updates_total": adaptive.updates,
        "adaptive_probes_total": 0.0,
        "adaptive_probing": 0.0,
        "baseline": pytest.approx(0.1),
    }
    # ServerCL, as the levels see it, is the applied limit.
    stats = limiter.statistics()
    assert stats.server_concurrency_limit == adaptive.applied_limit


async def test_a_probe_shows_in_the_scrape_and_the_dashboard_feed() -> None:
    # Learned at the top from the start (initialLimit = maxLimit) with a flat latency: nothing
    # lowers the limit and no baseline was seen below it, so the 10th update probes.
    config = adaptive_config()
    config["adaptiveConcurrency"]["initialLimit"] = 40
    clock = FakeClock()
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(config, clock=clock, observer=metrics)
    metrics.bind(limiter)
    adaptive = limiter.adaptive_concurrency
    while adaptive is not None and not adaptive.probing and clock.now() < 20:
        assert scrape(registry)["adaptive_probing"] == 0.0
        await wave(limiter, clock, 60, 0.1)
        adaptive = limiter.adaptive_concurrency
    assert adaptive is not None and adaptive.probing and adaptive.probes == 1
    values = scrape(registry)
    assert (values["adaptive_probes_total"], values["adaptive_probing"]) == (1.0, 1.0)
    assert values["adaptive_limit_seats"] == 40.0  # the learned limit is kept
    assert values["adaptive_applied_limit_seats"] == adaptive.applied_limit < 40
    feed = dashboard_feed(limiter)["adaptive"]
    assert (feed["probes"], feed["probing"]) == (1, True)


def test_without_adaptive_concurrency_no_adaptive_metric_is_exported() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.bind(Limiter(single_level_config(limit=10), clock=FakeClock(), observer=metrics))
    text = generate_latest(registry).decode()
    assert "current_limit_seats" in text
    assert "adaptive" not in text


async def test_the_dashboard_feed_carries_the_adaptive_limit_only_when_on() -> None:
    off = Limiter(single_level_config(limit=10), clock=FakeClock())
    assert dashboard_feed(off)["adaptive"] is None
    clock = FakeClock()
    limiter = Limiter(adaptive_config(), clock=clock)
    await wave(limiter, clock, 30, 0.1)
    await clock.advance_to(0.95)
    await wave(limiter, clock, 30, 0.1)
    feed = dashboard_feed(limiter)
    json.dumps(feed)  # plain JSON types only
    adaptive = limiter.adaptive_concurrency
    assert adaptive is not None
    assert feed["adaptive"] == {
        "algorithm": "Gradient",
        "limit": adaptive.limit,
        "applied_limit": 12,
        "min_limit": 2,
        "max_limit": 40,
        "baselines": {"test": pytest.approx(0.1)},
        "last_ratio": adaptive.last_ratio,
        "last_latency": pytest.approx(0.1),
        "updates": 1,
        "probes": 0,
        "probing": False,
    }
    assert feed["server_concurrency_limit"] == 12


def test_adaptive_md_lists_every_adaptive_metric() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "adaptive.md").read_text()
    section = text.split("## Observing it", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{name}" in section for name in ADAPTIVE_METRICS)
