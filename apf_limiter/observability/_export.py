"""Turning accumulated numbers into ``prometheus_client`` metric families.

Only this module and :mod:`~apf_limiter.observability._metrics` touch ``prometheus_client``,
and only when a scrape (or registration) runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from apf_limiter.observability._buckets import BucketCounts
from apf_limiter.observability._catalog import METRICS, MetricSpec


class FamilyBuilder:
    """Creates the metric families of the catalogue under one name prefix.

    Args:
        prefix: ``<namespace>_<subsystem>_`` (may be empty).
    """

    def __init__(self, prefix: str) -> None:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )
        from prometheus_client.utils import floatToGoString

        self.prefix = prefix
        self._classes: dict[str, Any] = {
            "counter": CounterMetricFamily,
            "gauge": GaugeMetricFamily,
            "histogram": HistogramMetricFamily,
        }
        self._bound_text: Callable[[float], str] = floatToGoString

    def family(self, spec: MetricSpec) -> Any:
        """An empty family for ``spec``."""
        cls = self._classes[spec.kind]
        return cls(self.prefix + spec.name, spec.help, labels=list(spec.labels))

    def describe(self) -> list[Any]:
        """Empty families for every metric of the catalogue (for name-clash checks)."""
        return [self.family(spec) for spec in METRICS]

    def values(self, spec: MetricSpec, samples: Mapping[tuple[str, ...], float]) -> Any:
        """A counter or gauge family with one sample per label-value tuple."""
        family = self.family(spec)
        for labels, value in sorted(samples.items()):
            family.add_metric(list(labels), float(value))
        return family

    def histograms(
        self, spec: MetricSpec, series: Iterable[tuple[tuple[str, ...], BucketCounts]]
    ) -> Any:
        """A histogram family with one histogram per label-value tuple."""
        family = self.family(spec)
        for labels, counts in sorted(series, key=lambda item: item[0]):
            buckets = [(self._bound_text(bound), value) for bound, value in counts.cumulative()]
            family.add_metric(list(labels), buckets, counts.sum)
        return family
