"""Scrape-time views of the engine: per-flow gauges, progress meters and ratio samples.

Everything here reads a limiter's :meth:`~apf_limiter.Limiter.dump`. The per-flow gauges
(requests and seats waiting and executing per priority level and flow schema) are exact at the
moment of the scrape: the executing requests are counted from the dump (their number is bounded
by the seats), the waiting ones are read from the counts the engine keeps as requests join and
leave queues (``LevelDump.waiting_summary``, in a dump taken with ``waiting=False``), so a
scrape's cost does not grow with the depth of the queues, as Kubernetes' gauges are updated on
each event (``fc/metrics/metrics.go``). The timing ratio histograms of Kubernetes are
approximated by :class:`RatioSampler`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from apf_limiter.engine._dump import READ_ONLY_VERBS as READ_ONLY_VERBS
from apf_limiter.engine._seat_seconds import (
    ESTIMATED_SERVICE_NS,
    MASK,
    go_round,
    seat_seconds_float,
    seats_times_duration,
)
from apf_limiter.observability._buckets import BucketCounts
from apf_limiter.observability._catalog import metric

if TYPE_CHECKING:
    from apf_limiter.engine._dump import EngineDump, LevelDump, RequestDump

Pair = tuple[str, str]
K = TypeVar("K")


@dataclass
class FlowGauges:
    """Requests and seats waiting and executing, per (priority level, flow schema).

    Attributes:
        waiting: Requests waiting in queues.
        waiting_seats: Seats the waiting requests ask for.
        executing: Requests executing.
        executing_seats: Seats held by executing requests and by lingering ones (finished,
            holding their final seats for the additional latency).
        read_only: Waiting and executing read-only requests (``(phase, count)`` keys).
        mutating: Waiting and executing mutating requests.
    """

    waiting: Counter[Pair] = field(default_factory=Counter)
    waiting_seats: Counter[Pair] = field(default_factory=Counter)
    executing: Counter[Pair] = field(default_factory=Counter)
    executing_seats: Counter[Pair] = field(default_factory=Counter)
    read_only: Counter[str] = field(default_factory=Counter)
    mutating: Counter[str] = field(default_factory=Counter)

    def pairs(self) -> set[Pair]:
        """Every (level, schema) pair with something waiting or executing."""
        return set(self.waiting) | set(self.executing) | set(self.executing_seats)

    def count_kind(self, request: RequestDump, phase: str) -> None:
        """Count ``request`` as read-only or mutating in ``phase`` (waiting or executing)."""
        (self.read_only if request.verb in READ_ONLY_VERBS else self.mutating)[phase] += 1


def count_flows(dump: EngineDump) -> FlowGauges:
    """Count the waiting and executing requests of every level by flow schema."""
    gauges = FlowGauges()
    for level in dump.levels:
        name = level.name
        summary = level.waiting_summary
        if summary is not None:
            for schema, count in summary.requests.items():
                gauges.waiting[(name, schema)] += count
                gauges.waiting_seats[(name, schema)] += summary.seats[schema]
            waiting_requests = sum(summary.requests.values())
            gauges.read_only["waiting"] += summary.read_only
            gauges.mutating["waiting"] += waiting_requests - summary.read_only
        for queue in level.queues:
            for request in queue.waiting:  # a full dump (waiting=True)
                pair = (name, request.flow_schema)
                gauges.waiting[pair] += 1
                gauges.waiting_seats[pair] += request.max_seats
                gauges.count_kind(request, "waiting")
            _count_executing(gauges, name, queue.executing)
        _count_executing(gauges, name, level.queueless_executing)
        # Seats still held after the handler returned (additional latency).
        for request in level.lingering:
            gauges.executing_seats[(name, request.flow_schema)] += request.max_seats
    return gauges


def _count_executing(gauges: FlowGauges, level: str, requests: Iterable[RequestDump]) -> None:
    for request in requests:
        pair = (level, request.flow_schema)
        gauges.executing[pair] += 1
        gauges.executing_seats[pair] += request.max_seats
        gauges.count_kind(request, "executing")


def s_bounds(level: LevelDump) -> tuple[float, float, float, float] | None:
    """Return min and max ``next_dispatch_r`` over the queues that have waiting requests.

    Returns:
        ``(min, max, discounted min, discounted max)`` in seat-seconds, the discounted values
        less the work in progress (``seats_in_use`` x G); ``None`` when nothing waits.
    """
    plain: list[int] = []
    discounted: list[int] = []
    for queue in level.queues:
        if not queue.waiting_requests:
            continue
        r = queue.next_dispatch_r
        plain.append(r)
        discounted.append(
            (r - seats_times_duration(queue.seats_in_use, ESTIMATED_SERVICE_NS)) & MASK
        )
    if not plain:
        return None
    return (
        seat_seconds_float(min(plain)),
        seat_seconds_float(max(plain)),
        seat_seconds_float(min(discounted)),
        seat_seconds_float(max(discounted)),
    )


def concurrency_denominator(current_limit: int, server_concurrency_limit: int) -> int:
    """The denominator of the seat ratios: the current limit, or ServerCL/10 when it is 0."""
    if current_limit > 0:
        return current_limit
    return max(1, go_round(server_concurrency_limit / 10))


class RatioSampler:
    """Kubernetes' timing ratio histograms, sampled.

    Kubernetes observes each ratio continuously ("at the end of every nanosecond"), so a
    bucket holds the seconds the ratio spent at or below its bound. Here each :meth:`sample`
    observes the current ratios with a weight equal to the seconds since the previous sample:
    bucket values are still seconds, and ``_sum / _count`` is the time-weighted mean, at the
    resolution of the sampling interval (each scrape samples; call
    :meth:`PrometheusMetrics.sample` more often for finer resolution).

    Args:
        now: The time sampling starts from (the limiter's clock).
    """

    def __init__(self, now: float) -> None:
        self.last = now
        self.demand: dict[str, BucketCounts] = {}
        self.seat_utilization: dict[str, BucketCounts] = {}
        self.request_utilization: dict[tuple[str, str], BucketCounts] = {}
        self.read_vs_write: dict[tuple[str, str], BucketCounts] = {}

    def sample(self, dump: EngineDump, flows: FlowGauges, now: float) -> None:
        """Observe every ratio now, weighted by the time since the last sample."""
        weight = now - self.last
        if weight <= 0:
            return
        self.last = now
        server_cl = dump.statistics.server_concurrency_limit
        waiting_capacity = 0
        for level in dump.levels:
            name = level.name
            stats = level.statistics
            denominator = concurrency_denominator(stats.current_limit, server_cl)
            queue_capacity = max(1, level.queue_length_limit) * max(1, level.desired_num_queues)
            if level.desired_num_queues > 0:
                waiting_capacity += level.desired_num_queues * level.queue_length_limit
            _observe(
                self.demand,
                name,
                "demand_seats",
                (stats.executing_seats + stats.waiting_seats) / denominator,
                weight,
            )
            _observe(
                self.seat_utilization,
                name,
                "priority_level_seat_utilization",
                stats.executing_seats / denominator,
                weight,
            )
            _observe(
                self.request_utilization,
                ("waiting", name),
                "priority_level_request_utilization",
                stats.waiting_requests / queue_capacity,
                weight,
            )
            _observe(
                self.request_utilization,
                ("executing", name),
                "priority_level_request_utilization",
                stats.executing_requests / denominator,
                weight,
            )
        limits = {
            "waiting": max(1, waiting_capacity),
            "executing": max(1, dump.statistics.nominal_limit_sum),
        }
        for phase, limit in limits.items():
            for kind, counts in (("readOnly", flows.read_only), ("mutating", flows.mutating)):
                _observe(
                    self.read_vs_write,
                    (phase, kind),
                    "read_vs_write_current_requests",
                    counts[phase] / limit,
                    weight,
                )


def _observe(
    table: dict[K, BucketCounts], key: K, metric_name: str, value: float, weight: float
) -> None:
    counts = table.get(key)
    if counts is None:
        counts = table[key] = BucketCounts(metric(metric_name).buckets)
    counts.observe(value, weight)
