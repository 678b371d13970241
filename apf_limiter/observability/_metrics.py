"""Prometheus metrics with the Kubernetes names: :class:`PrometheusMetrics`.

``PrometheusMetrics`` is both the limiter's :class:`~apf_limiter.observability.Observer` and a
``prometheus_client`` collector::

    metrics = PrometheusMetrics()               # registers in the global registry
    limiter = Limiter(config, observer=metrics)
    metrics.bind(limiter)                       # gauges and samplers read this limiter

Every metric of Kubernetes' ``apiserver_flowcontrol_*`` family is exported as
``<namespace>_<subsystem>_*`` (``apf_flowcontrol_*`` by default), with the same labels, so
dashboards and alerts carry over by a rename. A few of our own (``origin="apf_limiter"`` in
the catalogue) tell what shadow mode would have done and what the adaptive server limit has
learned. Per-request counters and histograms are
kept as plain numbers by the observer hooks (a dictionary lookup and a few additions per event;
no locks, no ``prometheus_client`` objects on the request path); everything else is read from
the engine when Prometheus scrapes. :mod:`apf_limiter.observability._catalog` lists which is which.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from apf_limiter._errors import RejectReason
from apf_limiter._observer import Observer
from apf_limiter._warn_once import WarnOnce
from apf_limiter.observability._adaptive_metrics import collect_adaptive
from apf_limiter.observability._catalog import metric
from apf_limiter.observability._due import run_due_before_read
from apf_limiter.observability._event_series import (
    WOULD_BE_REASONS,
    EventSeries,
    Pair,
    ShadowSeries,
)
from apf_limiter.observability._export import FamilyBuilder
from apf_limiter.observability._multiprocess import attach
from apf_limiter.observability._sampling import RatioSampler, count_flows
from apf_limiter.observability._top_flows import check_top, hash_key

if TYPE_CHECKING:
    from apf_limiter.config import Configuration
    from apf_limiter.limiter import Limiter

_INSTALL_HINT = (
    "Prometheus metrics need the prometheus_client package: pip install 'apf_limiter[prometheus]'"
)


def require_prometheus_client() -> ModuleType:
    """Import ``prometheus_client``, or raise an ImportError that says how to install it."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return prometheus_client


class PrometheusMetrics(Observer):
    """The limiter's metrics, exported to a Prometheus registry under Kubernetes names.

    Args:
        registry: The ``prometheus_client`` registry to register in; ``None`` for the
            global ``prometheus_client.REGISTRY``.
        namespace: Replaces Kubernetes' ``apiserver``; ``""`` for none.
        subsystem: Replaces ``flowcontrol``; ``""`` for none.
        top_flows: Who is flooding, opt-in: export, for each priority level, its top
            ``top_flows`` flows (flow schema and distinguisher) by seats in use, by waiting
            requests and by rejections over the last minute (``top_flow_*`` gauges, labelled
            with the distinguisher). Only the top N of each level are exported at each scrape,
            so the label set stays bounded. 0 (the default) exports none; at most 100.
        hash_distinguishers: In the ``distinguisher`` label, a short stable hash instead of
            the value: ``True`` unkeyed, or a key of up to 64 bytes.

    Raises:
        ImportError: If ``prometheus_client`` is not installed.
        ValueError: If the registry already has metrics of these names, or ``top_flows`` or
            ``hash_distinguishers`` is invalid.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        namespace: str = "apf",
        subsystem: str = "flowcontrol",
        top_flows: int = 0,
        hash_distinguishers: bool | bytes = False,
    ) -> None:
        self._top_flows = check_top(top_flows)
        self._hash_key = hash_key(hash_distinguishers)
        prometheus_client = require_prometheus_client()
        self.prefix = "".join(f"{part}_" for part in (namespace, subsystem) if part)
        self.registry = prometheus_client.REGISTRY if registry is None else registry
        self._families = FamilyBuilder(self.prefix)
        self._series: dict[Pair, EventSeries] = {}
        self._seen: set[tuple[str, str]] = set()
        self._shadow: dict[Pair, ShadowSeries] = {}
        self._queuing_levels: set[str] = set()
        self._just_arrived: EventSeries | None = None
        self._limiter: Limiter | None = None
        self._sampler: RatioSampler | None = None
        self._warn = WarnOnce()
        try:
            self.registry.register(self)
        except ValueError as clash:
            raise ValueError(
                f"this registry already has apf_limiter metrics named {self.prefix}*: one "
                "PrometheusMetrics per registry. Give the second one a registry of its own "
                "(PrometheusMetrics(prometheus_client.CollectorRegistry()), served by "
                "metrics_app(that_registry)) or another namespace=/subsystem=, or call "
                "unregister() on the first"
            ) from clash
        # PROMETHEUS_MULTIPROC_DIR: mirrored to prometheus_client's files, which metrics_app
        # sums over the worker processes (None otherwise: nothing changes).
        self._native = attach(self, self._series, self._shadow)

    # ----------------------------------------------------------------------------------------
    # wiring

    def bind(self, limiter: Limiter) -> None:
        """Read gauges, engine counters and ratio samples from ``limiter`` at each scrape.

        Create the limiter with ``observer=self`` for the per-request metrics. A scrape reads
        only ``limiter.statistics()`` and ``limiter.dump()``.
        """
        self._limiter = limiter
        self._sampler = RatioSampler(limiter.clock.now())
        if self._native is not None:
            self._native.bind(limiter)
        if limiter.observer is self:
            self.configuration_applied(limiter.config)

    @property
    def limiter(self) -> Limiter | None:
        """The bound limiter, if any."""
        return self._limiter

    def unregister(self) -> None:
        """Remove these metrics from their registry."""
        self.registry.unregister(self)

    def sample(self) -> None:
        """Sample the ratio histograms now (scrapes do it too; call this for finer detail)."""
        limiter, sampler = self._limiter, self._sampler
        if limiter is None or sampler is None:
            return
        dump = limiter.dump(waiting=False)
        sampler.sample(dump, count_flows(dump), limiter.clock.now())

    # ----------------------------------------------------------------------------------------
    # observer hooks: the request path, kept cheap

    def _new_series(self, priority_level: str, flow_schema: str) -> EventSeries:
        series = EventSeries(priority_level in self._queuing_levels)
        self._series[(priority_level, flow_schema)] = series
        return series

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        """Observe ``work_estimated_seats``."""
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        # BucketCounts.observe, inlined: these three hooks run on every admission.
        histogram = series.seats
        histogram.counts[bisect_left(histogram.bounds, seats)] += 1
        histogram.sum += seats
        self._just_arrived = series

    def request_enqueued(self, priority_level: str, flow_schema: str, queue_length: int) -> None:
        """Observe ``request_queue_length_after_enqueue``."""
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        series.queue_length.observe(queue_length)
        self._just_arrived = None

    def request_dispatched(
        self, priority_level: str, flow_schema: str, queue_wait: float, exempt: bool
    ) -> None:
        """Count ``dispatched_requests_total``; observe the wait (``execute="true"``)."""
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        series.dispatched += 1
        if not exempt:
            histogram = series.wait_executed
            histogram.counts[bisect_left(histogram.bounds, queue_wait)] += 1
            histogram.sum += queue_wait
            if series is self._just_arrived and series.queuing:
                # Dispatched at once from an empty queue: Kubernetes enqueues it first, so
                # it sees a queue of length 1 (the limiter reports no enqueue event here).
                series.queue_length.observe(1)
        self._just_arrived = None

    def request_rejected(
        self,
        priority_level: str,
        flow_schema: str,
        reason: RejectReason,
        queue_wait: float,
        exempt: bool,
    ) -> None:
        """Count ``rejected_requests_total{reason}``; observe the wait.

        As in Kubernetes, a request rejected on arrival is observed with ``execute="false"``
        and one that timed out in its queue with ``execute="true"``.
        """
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        series.rejected[reason] = series.rejected.get(reason, 0) + 1
        if not exempt:
            if reason == "time-out":
                series.wait_executed.observe(queue_wait)
            else:
                series.wait_not_executed.observe(queue_wait)
        self._just_arrived = None

    def request_cancelled(self, priority_level: str, flow_schema: str, queue_wait: float) -> None:
        """Count a cancelled wait as a ``time-out`` rejection, as Kubernetes does."""
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        series.rejected["time-out"] = series.rejected.get("time-out", 0) + 1
        series.wait_executed.observe(queue_wait)
        self._just_arrived = None

    def request_finished(
        self, priority_level: str, flow_schema: str, execution_time: float
    ) -> None:
        """Observe ``request_execution_seconds{type="regular"}``."""
        series = self._series.get((priority_level, flow_schema))
        if series is None:
            series = self._new_series(priority_level, flow_schema)
        histogram = series.execution
        histogram.counts[bisect_left(histogram.bounds, execution_time)] += 1
        histogram.sum += execution_time

    def request_shadowed(
        self,
        priority_level: str,
        flow_schema: str,
        queue_wait: float | None,
        reason: str | None,
    ) -> None:
        """Count what enforcing would have done to a request that ran in shadow mode.

        A would-be rejection counts in ``shadow_rejected_requests_total{reason}``, a would-be
        wait (0.0 included) is observed in ``shadow_request_wait_duration_seconds``, and a twin
        dropped by the cap counts in ``shadow_dropped_twins_total``. The Kubernetes counters
        saw the request itself, dispatched at once.
        """
        series = self._shadow.get((priority_level, flow_schema))
        if series is None:
            series = self._shadow[(priority_level, flow_schema)] = ShadowSeries()
            # Series at 0 for the reasons the level can give, from the pair's first request:
            # a ratio over shadow_rejected_requests_total then reads 0, not "no data".
            queuing = priority_level in self._queuing_levels
            series.rejected = dict.fromkeys(WOULD_BE_REASONS[queuing], 0)
        if reason is None:
            if queue_wait is not None:
                series.wait.observe(queue_wait)
        elif reason == "dropped":
            series.dropped += 1
        else:
            series.rejected[reason] = series.rejected.get(reason, 0) + 1

    def configuration_applied(self, config: Configuration) -> None:
        """Note which levels queue (for the queue-length histogram)."""
        queuing = set()
        for level in config.priority_levels:
            limited = level.limited
            if level.type == "Limited" and limited and limited.limit_response.type == "Queue":
                queuing.add(level.name)
        # Levels that left the configuration keep their last type while they drain.
        self._queuing_levels = queuing | (
            self._queuing_levels - {level.name for level in config.priority_levels}
        )
        for (level_name, _), series in self._series.items():
            series.queuing = level_name in self._queuing_levels

    # ----------------------------------------------------------------------------------------
    # prometheus_client collector protocol

    def describe(self) -> list[Any]:
        """The metric families this collector produces (names only)."""
        return self._families.describe()

    def collect(self) -> Iterator[Any]:
        """Produce every metric family (called by the registry at each scrape)."""
        limiter, sampler = self._limiter, self._sampler
        if limiter is not None:
            run_due_before_read(limiter)  # its events (a new configuration) come with it
        yield from self._collect_events()
        if limiter is None or sampler is None:
            self._warn(
                "metrics-unbound",
                "PrometheusMetrics was scraped with no limiter bound: the levels' gauges and "
                "the engine's counters are missing; call metrics.bind(limiter)",
            )
            return
        from apf_limiter.observability._scrape import collect_engine, collect_top_flows

        # The statistics come with it, taken in the same instant. Waiting requests come
        # counted, not copied: a scrape's cost does not grow with the depth of the queues.
        dump = limiter.dump(waiting=False)
        flows = count_flows(dump)
        sampler.sample(dump, flows, limiter.clock.now())
        yield from collect_engine(self._families, dump, dump.statistics, flows, sampler, self._seen)
        # With top_flows=0 the families come empty, as every metric of the catalogue does.
        yield from collect_top_flows(self._families, dump, self._top_flows, self._hash_key)
        yield from collect_adaptive(self._families, limiter.adaptive_concurrency)

    def _collect_events(self) -> Iterator[Any]:
        families = self._families
        series = list(self._series.items())
        self._seen.update(pair for pair, _ in series)
        yield families.values(
            metric("rejected_requests_total"),
            {
                (*pair, reason): count
                for pair, s in series
                for reason, count in list(s.rejected.items())
            },
        )
        yield families.values(
            metric("dispatched_requests_total"), {pair: s.dispatched for pair, s in series}
        )
        yield families.histograms(
            metric("request_queue_length_after_enqueue"),
            [(pair, s.queue_length) for pair, s in series if s.queue_length.count],
        )
        waits = [((*pair, "true"), s.wait_executed) for pair, s in series]
        waits += [((*pair, "false"), s.wait_not_executed) for pair, s in series]
        yield families.histograms(
            metric("request_wait_duration_seconds"), [(k, c) for k, c in waits if c.count]
        )
        yield families.histograms(
            metric("request_execution_seconds"),
            [((*pair, "regular"), s.execution) for pair, s in series if s.execution.count],
        )
        yield families.histograms(
            metric("work_estimated_seats"),
            [(pair, s.seats) for pair, s in series if s.seats.count],
        )
        yield families.family(metric("watch_count_samples"))
        shadow = list(self._shadow.items())
        yield families.values(
            metric("shadow_rejected_requests_total"),
            {
                (*pair, reason): count
                for pair, s in shadow
                for reason, count in list(s.rejected.items())
            },
        )
        yield families.histograms(
            metric("shadow_request_wait_duration_seconds"),
            [(pair, s.wait) for pair, s in shadow if s.wait.count],
        )
        yield families.values(
            metric("shadow_dropped_twins_total"), {pair: s.dropped for pair, s in shadow}
        )
