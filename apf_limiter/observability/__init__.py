"""Observability: Prometheus metrics, the Kubernetes debug dumps, and a live dashboard.

* :class:`PrometheusMetrics` — every ``apiserver_flowcontrol_*`` metric of Kubernetes under a
  configurable prefix (``apf_flowcontrol_*`` by default), and a few of our own for shadow
  mode (what enforcing would have done) and the adaptive server limit. Needs the
  ``prometheus`` extra (``prometheus_client``), imported only when metrics are created.
* :func:`metrics_app` — an ASGI app serving a registry, for ``/metrics``.
* :func:`debug_app` — the three Kubernetes dumps (text or JSON) and the HTML dashboard, each
  denied unless an ``authorize(scope)`` hook allows it.
* :func:`dump_priority_levels`, :func:`dump_queues`, :func:`dump_requests` and
  :func:`dashboard_feed` — the same data as values; :func:`dump_top_flows` — who is flooding:
  each level's top flows by seats, waiting requests and rejections over the last minute.
* :class:`Observer` — the interface a limiter reports each request's events to (subclass it
  for metrics of your own).

Everything here reads a limiter through :meth:`Limiter.dump`, :meth:`Limiter.statistics` and
:attr:`Limiter.adaptive_concurrency` only, never the engine's own objects.
"""

from apf_limiter._observer import Observer
from apf_limiter.observability._catalog import METRICS, MetricSpec
from apf_limiter.observability._dashboard import dashboard_feed
from apf_limiter.observability._debug_text import (
    Dump,
    dump_priority_levels,
    dump_queues,
    dump_requests,
    dump_top_flows,
)
from apf_limiter.observability._endpoints import (
    DEBUG_PREFIX,
    DebugApp,
    MetricsApp,
    debug_app,
    metrics_app,
)
from apf_limiter.observability._metrics import PrometheusMetrics

__all__ = [
    "DEBUG_PREFIX",
    "METRICS",
    "DebugApp",
    "Dump",
    "MetricSpec",
    "MetricsApp",
    "Observer",
    "PrometheusMetrics",
    "dashboard_feed",
    "debug_app",
    "dump_priority_levels",
    "dump_queues",
    "dump_requests",
    "dump_top_flows",
    "metrics_app",
]
