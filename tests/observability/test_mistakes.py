"""Mistakes in wiring the observability endpoints are loud: one warning (or error) each."""

from __future__ import annotations

import logging

import httpx
import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

from apf_limiter import Limiter
from apf_limiter.observability import DEBUG_PREFIX, PrometheusMetrics, debug_app, metrics_app
from apf_limiter.observability._asgi import Scope
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "apf_limiter" and record.levelno == logging.WARNING
    ]


def test_a_second_metrics_object_on_a_registry_says_how_to_have_two() -> None:
    registry = CollectorRegistry()
    first = PrometheusMetrics(registry)
    with pytest.raises(ValueError, match="one PrometheusMetrics per registry") as raised:
        PrometheusMetrics(registry)
    assert "CollectorRegistry()" in str(raised.value) and "namespace=" in str(raised.value)
    assert len(str(raised.value)) < 600  # not prometheus_client's list of 80 clashing names
    PrometheusMetrics(CollectorRegistry())  # what the message says works
    PrometheusMetrics(registry, namespace="other")
    first.unregister()
    PrometheusMetrics(registry)


def test_scraping_unbound_metrics_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        prometheus_client.generate_latest(registry)
        prometheus_client.generate_latest(registry)
    assert [w for w in _warnings(caplog) if "no limiter bound" in w] == [
        "PrometheusMetrics was scraped with no limiter bound: the levels' gauges and the "
        "engine's counters are missing; call metrics.bind(limiter)"
    ]
    caplog.clear()
    metrics.bind(Limiter(single_level_config(), clock=FakeClock()))
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        assert b"apf_flowcontrol_nominal_limit_seats" in prometheus_client.generate_latest(registry)
    assert _warnings(caplog) == []


def _client(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://apf")


async def test_debug_endpoints_without_authorize_say_they_deny_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = Limiter(single_level_config(), clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        app = debug_app(limiter)
        async with _client(app) as http:
            assert (await http.get(f"{DEBUG_PREFIX}/dump_queues")).status_code == 403
    assert len([w for w in _warnings(caplog) if "no authorize hook" in w]) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        debug_app(limiter, authorize=lambda scope: True)
    assert _warnings(caplog) == []


@pytest.mark.parametrize("verdict", ["yes", 1, object()])
async def test_an_authorize_hook_returning_a_non_bool_is_denied_loudly(
    caplog: pytest.LogCaptureFixture, verdict: object
) -> None:
    limiter = Limiter(single_level_config(), clock=FakeClock())

    def is_operator(scope: Scope) -> bool:
        return verdict  # type: ignore[return-value]

    registry = CollectorRegistry()
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        for app, path in (
            (debug_app(limiter, authorize=is_operator), f"{DEBUG_PREFIX}/dump_queues"),
            (metrics_app(registry, authorize=is_operator), "/"),
        ):
            async with _client(app) as http:
                for _ in range(3):
                    assert (await http.get(path)).status_code == 403
    said = [w for w in _warnings(caplog) if "not a bool" in w]
    assert len(said) == 2  # once per app, not per request
    assert f"returned {type(verdict).__name__}, not a bool: the request is denied" in said[0]
    assert "is_operator" in said[0]
