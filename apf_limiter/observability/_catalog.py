"""The metric catalogue: every Kubernetes ``apiserver_flowcontrol_*`` metric we export.

Then the few of our own (``origin="apf_limiter"``): shadow mode's would-be rejections, waits
and dropped twins, which levels are in shadow mode, and (opt-in) the top flows of each level;
and the adaptive server limit's learned and applied limits, bounds, baselines and latency
(``adaptive_*``, only while it is on).

Names are given without the ``<namespace>_<subsystem>_`` prefix (``apf_flowcontrol_`` by
default, ``apiserver_flowcontrol_`` in Kubernetes). ``source`` says how each one is produced:

* ``event``: counted by :class:`~apf_limiter.observability.PrometheusMetrics` from the
  limiter's observer events, exactly as each request passes;
* ``scrape``: read from the engine's own state at scrape time (exact at that moment);
* ``sampler``: a Kubernetes *timing ratio histogram*, approximated by sampling the ratio at
  each scrape (or :meth:`PrometheusMetrics.sample` call), weighted by the seconds since the
  previous sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DURATION_BUCKETS = (0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0)
PL = ("priority_level",)
PL_FS = ("priority_level", "flow_schema")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric.

    Attributes:
        name: The name without namespace and subsystem, e.g. ``rejected_requests_total``.
        kind: ``counter``, ``gauge`` or ``histogram``.
        labels: Label names, in order.
        help: The help text.
        source: ``event``, ``scrape`` or ``sampler`` (see the module docstring).
        stability: The Kubernetes stability level (``BETA`` or ``ALPHA``).
        buckets: Upper bounds of the histogram buckets (without ``+Inf``).
        origin: ``kubernetes`` for a metric of Kubernetes' ``apiserver_flowcontrol_*``
            family, ``apf_limiter`` for one of apf_limiter's additions (shadow mode, the
            adaptive server limit).
    """

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    source: Literal["event", "scrape", "sampler"]
    stability: Literal["BETA", "ALPHA"] = "ALPHA"
    buckets: tuple[float, ...] = ()
    origin: Literal["kubernetes", "apf_limiter"] = "kubernetes"


#: The spec of every metric exported (see the module docstring for the sources).
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("rejected_requests_total", "counter", (*PL_FS, "reason"),
               "Number of requests rejected by API Priority and Fairness", "event", "BETA"),
    MetricSpec("dispatched_requests_total", "counter", PL_FS,
               "Number of requests executed by API Priority and Fairness", "event", "BETA"),
    MetricSpec("current_inqueue_requests", "gauge", PL_FS,
               "Number of requests currently pending in queues", "scrape", "BETA"),
    MetricSpec("current_inqueue_seats", "gauge", PL_FS,
               "Number of seats currently pending in queues", "scrape"),
    MetricSpec("current_executing_requests", "gauge", PL_FS,
               "Number of requests executing now", "scrape", "BETA"),
    MetricSpec("current_executing_seats", "gauge", PL_FS,
               "Seats occupied by the requests executing now", "scrape", "BETA"),
    MetricSpec("request_queue_length_after_enqueue", "histogram", PL_FS,
               "Length of the queue, as seen by each request after it is enqueued", "event",
               buckets=(0.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0)),
    MetricSpec("request_wait_duration_seconds", "histogram", (*PL_FS, "execute"),
               "Length of time a request spent waiting in its queue", "event", "BETA",
               DURATION_BUCKETS),
    MetricSpec("request_execution_seconds", "histogram", (*PL_FS, "type"),
               "Duration of request execution", "event", buckets=DURATION_BUCKETS),
    MetricSpec("work_estimated_seats", "histogram", PL_FS,
               "Number of estimated seats (maximum of initial and final seats) of requests",
               "event", buckets=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0)),
    MetricSpec("watch_count_samples", "histogram", PL_FS,
               "Count of watchers for mutating requests (no watch tracking: always empty)",
               "event", buckets=(0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0)),
    MetricSpec("request_dispatch_no_accommodation_total", "counter", PL_FS,
               "Number of times a dispatch attempt found no room for the chosen request",
               "scrape"),
    MetricSpec("epoch_advance_total", "counter", (*PL, "success"),
               "Number of times the queue set's progress meter jumped backward", "scrape"),
    MetricSpec("current_r", "gauge", PL, "R(time of last change)", "scrape"),
    MetricSpec("dispatch_r", "gauge", PL, "R(time of last dispatch)", "scrape"),
    MetricSpec("latest_s", "gauge", PL, "S(most recently dispatched request)", "scrape"),
    MetricSpec("next_s_bounds", "gauge", (*PL, "bound"),
               "min and max, over queues, of S(oldest waiting request in queue)", "scrape"),
    MetricSpec("next_discounted_s_bounds", "gauge", (*PL, "bound"),
               "min and max, over queues, of S(oldest waiting request in queue) - estimated "
               "work in progress", "scrape"),
    MetricSpec("nominal_limit_seats", "gauge", PL,
               "Nominal number of execution seats configured for each priority level",
               "scrape", "BETA"),
    MetricSpec("lower_limit_seats", "gauge", PL,
               "Configured lower bound on number of execution seats of each priority level",
               "scrape"),
    MetricSpec("upper_limit_seats", "gauge", PL,
               "Configured upper bound on number of execution seats of each priority level",
               "scrape"),
    MetricSpec("current_limit_seats", "gauge", PL,
               "Current derived number of execution seats available to each priority level",
               "scrape"),
    MetricSpec("demand_seats", "histogram", PL,
               "Seconds spent at each ratio of (seats the level could use) / (current seat "
               "limit, or max(1, round(server seat limit/10)) when that is 0); sampled",
               "sampler",
               buckets=(0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.7, 2.0, 2.8, 4.0, 6.0)),
    MetricSpec("demand_seats_high_watermark", "gauge", PL,
               "High watermark, over last adjustment period, of demand_seats", "scrape"),
    MetricSpec("demand_seats_average", "gauge", PL,
               "Time-weighted average, over last adjustment period, of demand_seats",
               "scrape"),
    MetricSpec("demand_seats_stdev", "gauge", PL,
               "Time-weighted standard deviation, over last adjustment period, of "
               "demand_seats", "scrape"),
    MetricSpec("demand_seats_smoothed", "gauge", PL,
               "Smoothed seat demands", "scrape"),
    MetricSpec("target_seats", "gauge", PL, "Seat allocation targets", "scrape"),
    MetricSpec("seat_fair_frac", "gauge", (),
               "Fair fraction of server's concurrency to allocate to each priority level "
               "that can use it", "scrape"),
    MetricSpec("priority_level_seat_utilization", "histogram", (*PL, "phase"),
               "Seconds spent at each utilization of seats (seats held / current seat limit, "
               "or max(1, round(server seat limit/10)) when that is 0); sampled", "sampler",
               buckets=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)),
    MetricSpec("priority_level_request_utilization", "histogram", ("phase", *PL),
               "Seconds spent at each ratio of requests waiting (to max(1, queueLengthLimit) x "
               "max(1, queues)) or executing (to the seat limit); sampled", "sampler",
               buckets=(0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.25, 0.5, 0.75, 1.0)),
    MetricSpec("read_vs_write_current_requests", "histogram", ("phase", "request_kind"),
               "Seconds spent at each ratio of read-only or mutating requests waiting (to all "
               "queue capacity) or executing (to the nominal seats); sampled", "sampler",
               buckets=(0.0, 0.001, 0.01, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95,
                        0.99, 1.0)),
    # apf_limiter's additions: shadow mode (limiter/_shadow.py). At a shadow level the
    # Kubernetes counters above count the real requests, which all run at once; these count
    # what enforcing would have done to them.
    MetricSpec("shadow_rejected_requests_total", "counter", (*PL_FS, "reason"),
               "Number of requests that ran in shadow mode and enforcing would have rejected",
               "event", origin="apf_limiter"),
    MetricSpec("shadow_request_wait_duration_seconds", "histogram", PL_FS,
               "Length of time a request that ran in shadow mode would have waited in its "
               "queue if enforced (0 when it would have run at once)", "event",
               buckets=DURATION_BUCKETS, origin="apf_limiter"),
    MetricSpec("shadow_dropped_twins_total", "counter", PL_FS,
               "Number of shadow-mode twins dropped by the max_shadow_twins cap before they "
               "ended; while twins are dropped, the level's would-be numbers undercount",
               "event", origin="apf_limiter"),
    MetricSpec("priority_level_shadow", "gauge", PL,
               "1 when the priority level is in shadow mode (nothing held or rejected), "
               "0 when it enforces", "scrape", origin="apf_limiter"),
    # Who is flooding, opt-in (PrometheusMetrics(top_flows=N)): per level only its top N
    # flows of each ranking, so the label set stays bounded whatever clients send.
    MetricSpec("top_flow_seats_in_use", "gauge", (*PL_FS, "distinguisher"),
               "Seats held now by each of the top N flows of the priority level by seats in "
               "use (opt-in; only the top N flows)", "scrape", origin="apf_limiter"),
    MetricSpec("top_flow_waiting_requests", "gauge", (*PL_FS, "distinguisher"),
               "Requests waiting now of each of the top N flows of the priority level by "
               "waiting requests (opt-in; only the top N flows)", "scrape", origin="apf_limiter"),
    MetricSpec("top_flow_rejections", "gauge", (*PL_FS, "distinguisher"),
               "Rejections and ended waits over the last minute of each of the top N flows of "
               "the priority level by rejections, at least (a bounded sketch's lower bound; "
               "opt-in; only the top N flows)", "scrape", origin="apf_limiter"),
    # apf_limiter's additions: the adaptive server limit (adaptiveConcurrency), exported only
    # while it is on. ServerCL has no Kubernetes metric: there it is a flag, never learned.
    MetricSpec("adaptive_limit_seats", "gauge", (),
               "Server concurrency limit learned from execution latency (adaptiveConcurrency), "
               "unrounded", "scrape", origin="apf_limiter"),
    MetricSpec("adaptive_applied_limit_seats", "gauge", (),
               "Server concurrency limit in force (ServerCL): the learned limit, rounded, as "
               "last applied", "scrape", origin="apf_limiter"),
    MetricSpec("adaptive_min_limit_seats", "gauge", (),
               "Lower bound of the learned server concurrency limit (minLimit)", "scrape",
               origin="apf_limiter"),
    MetricSpec("adaptive_max_limit_seats", "gauge", (),
               "Upper bound of the learned server concurrency limit (maxLimit)", "scrape",
               origin="apf_limiter"),
    MetricSpec("adaptive_baseline_seconds", "gauge", PL,
               "Baseline execution time of the priority level that latency is compared with",
               "scrape", origin="apf_limiter"),
    MetricSpec("adaptive_latency_ratio", "gauge", (),
               "Latency ratio (seat-weighted execution time over baseline) of the last update "
               "of the learned limit; 0 before the first", "scrape", origin="apf_limiter"),
    MetricSpec("adaptive_last_latency_seconds", "gauge", (),
               "Execution time of the last request sampled by the adaptive limit", "scrape",
               origin="apf_limiter"),
    MetricSpec("adaptive_updates_total", "counter", (),
               "Number of updates of the learned server concurrency limit", "scrape",
               origin="apf_limiter"),
    MetricSpec("adaptive_probes_total", "counter", (),
               "Number of probes of the adaptive limit: moments the limit in force was lowered "
               "to see the backend's latency below the concurrency that ran", "scrape",
               origin="apf_limiter"),
    MetricSpec("adaptive_probing", "gauge", (),
               "1 while a probe holds the limit in force low (the learned limit is kept), "
               "else 0", "scrape", origin="apf_limiter"),
)  # fmt: skip

_BY_NAME = {spec.name: spec for spec in METRICS}


def metric(name: str) -> MetricSpec:
    """Return the spec of the metric named ``name`` (without prefix).

    Raises:
        KeyError: If there is no such metric.
    """
    return _BY_NAME[name]
