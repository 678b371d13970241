"""Histogram accumulators: counts per bucket, kept as plain numbers until a scrape."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


class BucketCounts:
    """Observations counted into buckets ``value <= bound`` (plus ``+Inf``), with their sum.

    Counts are stored per bucket (not cumulative) and made cumulative only when exported, so
    an observation costs one bisection and two additions. A *weighted* observation adds its
    weight instead of one: that is how the timing ratio histograms accumulate seconds.

    Args:
        bounds: The buckets' upper bounds, ascending (``+Inf`` is implicit).
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts: list[float] = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, weight: float = 1) -> None:
        """Count ``value`` (``weight`` times) into the first bucket whose bound is >= it."""
        self.counts[bisect_left(self.bounds, value)] += weight
        self.sum += value * weight

    @property
    def count(self) -> float:
        """Total number (or weight) of observations."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, float]]:
        """Return ``(upper bound, observations <= bound)`` pairs, ending with ``+Inf``."""
        total = 0.0
        result = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            result.append((bound, total))
        return result
