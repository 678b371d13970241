"""Metrics across worker processes: ``prometheus_client``'s multiprocess mode.

With ``PROMETHEUS_MULTIPROC_DIR`` set (``prometheus_client``'s convention), a
:class:`~apf_limiter.observability.PrometheusMetrics` gets a :class:`NativeMetrics`: the
catalogue as ``prometheus_client``'s own metrics, whose values live in memory-mapped files of
that directory, one per process, so that ``metrics_app`` on any worker can sum them
(``_multiprocess_exposition.py``). A worker's values live in its own memory, so each worker
writes them itself, at each *refresh*: the events counted since the last one (the request path
stays as in one process: a file write per event would cost several times the admission), and
the engine's state, read as a scrape would. Refreshes run at ``bind``, every
:data:`REFRESH_INTERVAL` seconds while requests are in flight (a timer armed by an arrival when
none runs: one attribute test per request), once more after the last one, and before each
scrape the worker answers.

Only ``prometheus_client``'s public API is used: its ``Counter`` and ``Gauge``, and for the
histograms, whose gains are weighted (a ratio sampler adds seconds, not one observation), the
value class of its ``values`` module (``values.ValueClass``, the one its own metrics keep each
number in), one per bucket and one for the sum, exported by a collector of our own
(:class:`FileHistogram`). What is mirrored comes from the owner's event tables, handed over
by the owner itself (:func:`attach`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from apf_limiter.engine._seat_seconds import seat_seconds_float
from apf_limiter.observability._adaptive_metrics import adaptive_samples
from apf_limiter.observability._buckets import BucketCounts
from apf_limiter.observability._catalog import METRICS, MetricSpec, metric
from apf_limiter.observability._event_series import EventSeries, Pair, ShadowSeries
from apf_limiter.observability._sampling import RatioSampler, count_flows, s_bounds

if TYPE_CHECKING:
    from apf_limiter.limiter import Limiter

REFRESH_INTERVAL = 1.0
"""Seconds between two refreshes of a worker's gauges while requests are in flight."""

GaugeMode = Literal["livesum", "liveall", "livemax"]
GAUGE_MODES: dict[str, GaugeMode] = {
    # What the process group holds: summed over live workers, so ratios such as seats in use
    # over current_limit_seats keep their meaning.
    "current_inqueue_requests": "livesum",
    "current_inqueue_seats": "livesum",
    "current_executing_requests": "livesum",
    "current_executing_seats": "livesum",
    "nominal_limit_seats": "livesum",
    "lower_limit_seats": "livesum",
    "upper_limit_seats": "livesum",
    "current_limit_seats": "livesum",
    # One worker's engine internals (virtual time, its own borrowing): a sum means nothing,
    # so one series per live worker, with a pid label.
    "current_r": "liveall",
    "dispatch_r": "liveall",
    "latest_s": "liveall",
    "next_s_bounds": "liveall",
    "next_discounted_s_bounds": "liveall",
    "demand_seats_high_watermark": "liveall",
    "demand_seats_average": "liveall",
    "demand_seats_stdev": "liveall",
    "demand_seats_smoothed": "liveall",
    "target_seats": "liveall",
    "seat_fair_frac": "liveall",
    # A flag: 1 when any live worker runs the level in shadow mode.
    "priority_level_shadow": "livemax",
    # Each worker learns its own adaptive limit: one series per live worker.
    "adaptive_limit_seats": "liveall",
    "adaptive_applied_limit_seats": "liveall",
    "adaptive_min_limit_seats": "liveall",
    "adaptive_max_limit_seats": "liveall",
    "adaptive_baseline_seconds": "liveall",
    "adaptive_latency_ratio": "liveall",
    "adaptive_last_latency_seconds": "liveall",
    "adaptive_probing": "liveall",
    # Not written in this mode: a series once written stays, so the top N of each moment would
    # pile up; each worker's top flows are in its dump_top_flows and dashboard.
    "top_flow_seats_in_use": "liveall",
    "top_flow_waiting_requests": "liveall",
    "top_flow_rejections": "liveall",
}
"""The ``multiprocess_mode`` of each gauge (documented in docs/observability.md)."""

# Every NativeMetrics of this process, refreshed before a scrape that this process answers.
_INSTANCES: weakref.WeakSet[NativeMetrics] = weakref.WeakSet()

Labels = tuple[str, ...]


def multiprocess_dir() -> str | None:
    """The directory of ``prometheus_client``'s multiprocess mode, or ``None`` when it is off."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def attach(
    owner: Any, series: Mapping[Pair, EventSeries], shadow: Mapping[Pair, ShadowSeries]
) -> NativeMetrics | None:
    """In multiprocess mode, give ``owner`` a :class:`NativeMetrics` that mirrors it to files.

    Args:
        owner: A ``PrometheusMetrics``. It keeps counting events in its own tables (the
            request path is unchanged); each refresh adds what they gained to the files. Its
            ``request_arrived`` hook is wrapped (an instance attribute: the limiter looks the
            hook up at each event) to start the refresh timer when none runs.
        series: The owner's event table, read (never written) at each refresh.
        shadow: The owner's shadow-mode table, read likewise.

    Returns:
        The native metrics, or ``None`` (nothing changed) without ``PROMETHEUS_MULTIPROC_DIR``.
    """
    if multiprocess_dir() is None:
        return None
    native = NativeMetrics(owner, series, shadow)
    arrived = owner.request_arrived

    def request_arrived(priority_level: str, flow_schema: str, seats: int) -> None:
        arrived(priority_level, flow_schema, seats)
        if native.timer is None:
            native.served = True
            native.arm()

    owner.request_arrived = request_arrived
    return native


class NativeMetrics:
    """The catalogue as ``prometheus_client`` metrics, written by each worker at its refreshes.

    Args:
        owner: The ``PrometheusMetrics`` mirrored (its ``prefix`` names the metrics).
        series: Its event table (:class:`EventSeries` by level and schema).
        shadow: Its shadow-mode table.
        interval: Seconds between refreshes while requests are in flight.
    """

    def __init__(
        self,
        owner: Any,
        series: Mapping[Pair, EventSeries],
        shadow: Mapping[Pair, ShadowSeries],
        interval: float = REFRESH_INTERVAL,
    ) -> None:
        from prometheus_client import Counter, Gauge

        prefix = owner.prefix
        self.owner = owner
        self.series = series
        self.shadow = shadow
        self.interval = interval
        self.metrics: dict[str, Any] = {}
        for spec in METRICS:
            if spec.name.startswith("adaptive_"):
                # Created once the adaptive limit is on: a metric without labels would be
                # exported at 0 at once, and a limit of 0 is not what "off" means.
                continue
            name, labels = prefix + spec.name, list(spec.labels)
            if spec.kind == "histogram":
                self.metrics[spec.name] = FileHistogram(name, spec)
            elif spec.kind == "counter":
                self.metrics[spec.name] = Counter(name, spec.help, labels, registry=None)
            else:
                mode = GAUGE_MODES[spec.name]
                self.metrics[spec.name] = Gauge(
                    name, spec.help, labels, registry=None, multiprocess_mode=mode
                )
        self._children: dict[tuple[str, Labels], Any] = {}
        self._limiter: Limiter | None = None
        self._sampler: RatioSampler | None = None
        self.timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._seen: set[tuple[str, str]] = set()
        self._totals: dict[tuple[str, Labels], float] = {}  # counters written so far
        self._pushed: dict[tuple[str, Labels], tuple[list[float], float]] = {}
        # Whether this process saw a request or a scrape; and the process that bound it.
        self.served = False
        self._bound_pid: int | None = None
        _INSTANCES.add(self)
        _watch_forks()

    def child(self, name: str, labels: Labels) -> Any:
        """The ``prometheus_client`` child of metric ``name`` (no prefix) for ``labels``."""
        key = (name, labels)
        child = self._children.get(key)
        if child is None:
            parent = self.metrics[name]
            many = labels or isinstance(parent, FileHistogram)
            child = self._children[key] = parent.labels(*labels) if many else parent
        return child

    # ----------------------------------------------------------------------------------------
    # the engine's state, written by each worker

    def bind(self, limiter: Limiter) -> None:
        """Write ``limiter``'s gauges now and at each refresh."""
        self._limiter = limiter
        self._sampler = RatioSampler(limiter.clock.now())
        self._bound_pid = os.getpid()
        self.refresh()

    def forked(self, parent: int) -> None:
        """In a child just forked from ``parent``: drop the gauges of a parent that never served.

        That parent is ``gunicorn --preload``'s master: it imported the app (limiter and
        metrics included) and wrote its gauges at :meth:`bind`; it is alive, so its live
        gauges would count as one more worker's. The first child removes its files
        (``mark_process_dead``), and each child writes its own now, under its own pid. A
        process that served keeps its files when it forks (a worker's process pool).
        """
        if self._bound_pid != parent or self.served:
            return
        from prometheus_client import multiprocess

        # A sibling forked at the same time may remove them first.
        with contextlib.suppress(OSError):
            multiprocess.mark_process_dead(parent)  # type: ignore[no-untyped-call]
        self._bound_pid = os.getpid()
        self.refresh()

    def arm(self) -> None:
        """Refresh in :attr:`interval` seconds (on the running event loop, if any)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop: binds and scrapes still refresh
        self.timer = loop.call_later(self.interval, self._tick)
        self._timer_loop = loop

    def _tick(self) -> None:
        self.timer = None
        if self.refresh():
            self.arm()  # requests in flight: refresh again; otherwise the next arrival arms

    def refresh(self) -> bool:
        """Add the events counted since the last refresh; write the bound limiter's state.

        Returns:
            Whether any request was waiting or holding seats.
        """
        if self._timer_loop is not None and self._timer_loop.is_closed():
            self.timer = None  # lost with its event loop: the next arrival arms a new one
        self._push_events()
        limiter, sampler = self._limiter, self._sampler
        if limiter is None or sampler is None:
            return False
        dump = limiter.dump(waiting=False)
        stats = dump.statistics
        flows = count_flows(dump)
        busy = bool(flows.pairs())
        self._seen.update(flows.pairs())
        self._seen.update(self.series)  # flows seen by events only also read 0
        for pair in self._seen:
            self._set("current_inqueue_requests", pair, flows.waiting[pair])
            self._set("current_inqueue_seats", pair, flows.waiting_seats[pair])
            self._set("current_executing_requests", pair, flows.executing[pair])
            self._set("current_executing_seats", pair, flows.executing_seats[pair])
        for level in dump.levels:
            name = level.name
            for schema, count in level.no_accommodation_by_flow_schema.items():
                self._count("request_dispatch_no_accommodation_total", (name, schema), count)
            self._count("epoch_advance_total", (name, "true"), level.epoch_advances)
            self._count("epoch_advance_total", (name, "false"), level.epoch_advance_failures)
            self._set("current_r", (name,), seat_seconds_float(level.current_r))
            self._set("dispatch_r", (name,), seat_seconds_float(level.dispatch_r))
            self._set("latest_s", (name,), seat_seconds_float(level.latest_s))
            bounds = s_bounds(level)
            if bounds is not None:  # as Kubernetes, the last value stays while nothing waits
                self._set("next_s_bounds", (name, "min"), bounds[0])
                self._set("next_s_bounds", (name, "max"), bounds[1])
                self._set("next_discounted_s_bounds", (name, "min"), bounds[2])
                self._set("next_discounted_s_bounds", (name, "max"), bounds[3])
            self._set("priority_level_shadow", (name,), 1.0 if level.shadow else 0.0)
        for level_name, s in stats.priority_levels.items():
            for metric_name, value in (
                ("nominal_limit_seats", s.nominal_limit),
                ("lower_limit_seats", s.lower_limit),
                ("upper_limit_seats", s.upper_limit),
                ("current_limit_seats", s.current_limit),
                ("demand_seats_high_watermark", s.demand_high_watermark),
                ("demand_seats_average", s.demand_average),
                ("demand_seats_stdev", s.demand_stdev),
                ("demand_seats_smoothed", s.demand_smoothed),
                ("target_seats", s.target_limit),
            ):
                self._set(metric_name, (level_name,), value)
        self._set("seat_fair_frac", (), stats.fair_fraction)
        adaptive = limiter.adaptive_concurrency
        if adaptive is not None:
            self._create_adaptive()
            for name, values in adaptive_samples(adaptive).items():
                for labels, value in values.items():
                    if metric(name).kind == "counter":
                        self._count(name, labels, value)
                    else:
                        self._set(name, labels, value)
        sampler.sample(dump, flows, limiter.clock.now())
        self._push_samples(sampler)
        return busy

    def _create_adaptive(self) -> None:
        """Create the ``adaptive_*`` metrics, at the first refresh that finds the limit on."""
        if "adaptive_limit_seats" in self.metrics:
            return
        from prometheus_client import Counter, Gauge

        for spec in METRICS:
            if spec.name.startswith("adaptive_"):
                name, labels = self.owner.prefix + spec.name, list(spec.labels)
                self.metrics[spec.name] = (
                    Counter(name, spec.help, labels, registry=None)
                    if spec.kind == "counter"
                    else Gauge(
                        name,
                        spec.help,
                        labels,
                        registry=None,
                        multiprocess_mode=GAUGE_MODES[spec.name],
                    )
                )

    def _set(self, name: str, labels: Labels, value: float) -> None:
        self.child(name, labels).set(value)

    def _count(self, name: str, labels: Labels, total: float) -> None:
        """Add what an engine counter gained since the last refresh."""
        last = self._totals.get((name, labels), 0.0)
        # A level created anew starts again from 0: its whole count is new.
        gained = total - last if total >= last else total
        self._totals[(name, labels)] = total
        child = self.child(name, labels)  # exported at 0 too, as one process does
        if gained > 0:
            child.inc(gained)

    def _push_events(self) -> None:
        for pair, series in list(self.series.items()):
            self._count("dispatched_requests_total", pair, series.dispatched)
            for reason, count in list(series.rejected.items()):
                self._count("rejected_requests_total", (*pair, reason), count)
            self._histogram("request_queue_length_after_enqueue", pair, series.queue_length)
            self._histogram("request_wait_duration_seconds", (*pair, "true"), series.wait_executed)
            self._histogram(
                "request_wait_duration_seconds", (*pair, "false"), series.wait_not_executed
            )
            self._histogram("request_execution_seconds", (*pair, "regular"), series.execution)
            self._histogram("work_estimated_seats", pair, series.seats)
        for pair, shadow in list(self.shadow.items()):
            for reason, count in list(shadow.rejected.items()):
                self._count("shadow_rejected_requests_total", (*pair, reason), count)
            self._histogram("shadow_request_wait_duration_seconds", pair, shadow.wait)
            self._count("shadow_dropped_twins_total", pair, shadow.dropped)

    def _push_samples(self, sampler: RatioSampler) -> None:
        for key, counts in list(sampler.demand.items()):
            self._histogram("demand_seats", (key,), counts)
        for key, counts in list(sampler.seat_utilization.items()):
            self._histogram("priority_level_seat_utilization", (key, "executing"), counts)
        for labels, counts in list(sampler.request_utilization.items()):
            self._histogram("priority_level_request_utilization", labels, counts)
        for labels, counts in list(sampler.read_vs_write.items()):
            self._histogram("read_vs_write_current_requests", labels, counts)

    def _histogram(self, name: str, labels: Labels, counts: BucketCounts) -> None:
        """Add what a histogram gained since the last refresh (exported once it has any)."""
        key = (name, labels)
        pushed = self._pushed.get(key)
        if pushed is None:
            if not counts.count:
                return
            pushed = ([0.0] * len(counts.counts), 0.0)
        child = self.child(name, labels)
        # Histogram.observe takes one value at a time (and no weight, which the sampled ones
        # need): add the gains to the per-bucket values, not cumulative as in BucketCounts.
        for value, now, before in zip(child.buckets, counts.counts, pushed[0], strict=True):
            if now != before:
                value.inc(now - before)
        if counts.sum != pushed[1]:
            child.sum.inc(counts.sum - pushed[1])
        self._pushed[key] = (list(counts.counts), counts.sum)


class FileHistogram:
    """A histogram whose buckets take weighted gains: a collector of our own.

    ``prometheus_client``'s ``Histogram`` counts one observation at a time. This keeps, per
    label set, the numbers its ``Histogram`` would keep, in the same ``values.ValueClass``
    (so, in multiprocess mode, the same entries of the same ``histogram_<pid>.db`` file, which
    ``MultiProcessCollector`` sums), and adds gains to them directly.

    Args:
        name: The metric's full name (with its prefix).
        spec: Its catalogue entry (help, labels, bucket bounds).
    """

    def __init__(self, name: str, spec: MetricSpec) -> None:
        self.name = name
        self.help = spec.help
        self.labelnames = tuple(spec.labels)
        self.bounds = (*(float(bound) for bound in spec.buckets), float("inf"))
        self._children: dict[Labels, HistogramValues] = {}

    def labels(self, *values: str) -> HistogramValues:
        """The numbers of one label set, created (at 0) on first use."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = HistogramValues(self, values)
        return child

    def collect(self) -> Iterator[Any]:
        """This process's values, as a ``HistogramMetricFamily`` (in-memory mode)."""
        from prometheus_client.metrics_core import HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        family = HistogramMetricFamily(self.name, self.help, labels=self.labelnames)
        for values, child in self._children.items():
            total = 0.0
            buckets = []
            for bound, value in zip(self.bounds, child.buckets, strict=True):
                total += value.get()
                buckets.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
            family.add_metric(list(values), buckets, child.sum.get())
        yield family


class HistogramValues:
    """One label set of a :class:`FileHistogram`: a value per bucket (not cumulative), a sum.

    Created as ``prometheus_client``'s ``Histogram`` creates a child's values: the sum, then
    each bucket labelled ``le``, with ``values.ValueClass`` (file-backed in multiprocess mode).
    """

    def __init__(self, histogram: FileHistogram, labelvalues: Labels) -> None:
        from prometheus_client import values
        from prometheus_client.utils import floatToGoString

        name, names, help_text = histogram.name, histogram.labelnames, histogram.help
        self.sum: Any = values.ValueClass(
            "histogram", name, name + "_sum", names, labelvalues, help_text
        )
        self.buckets: Sequence[Any] = [
            values.ValueClass(
                "histogram",
                name,
                name + "_bucket",
                (*names, "le"),
                (*labelvalues, floatToGoString(bound)),  # type: ignore[no-untyped-call]
                help_text,
            )
            for bound in histogram.bounds
        ]


def refresh_all() -> None:
    """Refresh every :class:`NativeMetrics` of this process (before it answers a scrape)."""
    for native in list(_INSTANCES):
        native.served = True
        native.refresh()


_fork_hook: list[bool] = []  # registered once per process (the hook outlives the instances)


def _watch_forks() -> None:
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook.append(True)


def _after_fork_in_child() -> None:
    parent = os.getppid()
    for native in list(_INSTANCES):
        native.forked(parent)
