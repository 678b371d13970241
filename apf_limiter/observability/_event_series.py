"""The event tables of :class:`~apf_limiter.observability.PrometheusMetrics`.

The observer hooks count each request's events into these plain numbers (no
``prometheus_client`` object on the request path); a scrape exports them, and in multiprocess
mode each worker's refreshes add what they gained to its files.
"""

from __future__ import annotations

from apf_limiter.observability._buckets import BucketCounts
from apf_limiter.observability._catalog import metric

Pair = tuple[str, str]
"""A (priority level, flow schema) pair: the labels every event table is kept by."""


class EventSeries:
    """The event-driven numbers of one (priority level, flow schema) pair."""

    __slots__ = (
        "dispatched",
        "rejected",
        "wait_executed",
        "wait_not_executed",
        "execution",
        "seats",
        "queue_length",
        "queuing",
    )

    def __init__(self, queuing: bool) -> None:
        self.dispatched = 0
        self.rejected: dict[str, int] = {}
        self.wait_executed = BucketCounts(metric("request_wait_duration_seconds").buckets)
        self.wait_not_executed = BucketCounts(metric("request_wait_duration_seconds").buckets)
        self.execution = BucketCounts(metric("request_execution_seconds").buckets)
        self.seats = BucketCounts(metric("work_estimated_seats").buckets)
        self.queue_length = BucketCounts(metric("request_queue_length_after_enqueue").buckets)
        self.queuing = queuing


#: The would-be rejection reasons of a level that queues (``True``) or rejects (``False``).
WOULD_BE_REASONS: dict[bool, tuple[str, ...]] = {
    True: ("queue-full", "time-out"),
    False: ("concurrency-limit",),
}


class ShadowSeries:
    """What enforcing would have done to the shadow-mode requests of one (level, schema) pair."""

    __slots__ = ("rejected", "wait", "dropped")

    def __init__(self) -> None:
        self.rejected: dict[str, int] = {}
        self.wait = BucketCounts(metric("shadow_request_wait_duration_seconds").buckets)
        self.dropped = 0
