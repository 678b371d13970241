"""The adaptive server limit's metric families (``adaptive_*``), read at scrape time.

They come from :attr:`~apf_limiter.Limiter.adaptive_concurrency`, nothing else, and only while
``adaptiveConcurrency`` is on: with it off there is no learned limit to report, and gauges
stuck at 0 would read as a limit of 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from apf_limiter.observability._catalog import metric
from apf_limiter.observability._export import FamilyBuilder

if TYPE_CHECKING:
    from apf_limiter.engine._statistics import AdaptiveStatistics


def adaptive_samples(adaptive: AdaptiveStatistics) -> dict[str, dict[tuple[str, ...], float]]:
    """Each ``adaptive_*`` metric's samples, by label values: the one mapping both exports use.

    Args:
        adaptive: The limiter's ``adaptive_concurrency``.
    """
    scalars = {
        "adaptive_limit_seats": adaptive.limit,
        "adaptive_applied_limit_seats": adaptive.applied_limit,
        "adaptive_min_limit_seats": adaptive.min_limit,
        "adaptive_max_limit_seats": adaptive.max_limit,
        "adaptive_latency_ratio": adaptive.last_ratio,
        "adaptive_last_latency_seconds": adaptive.last_latency,
        "adaptive_updates_total": adaptive.updates,
        "adaptive_probes_total": adaptive.probes,
        "adaptive_probing": adaptive.probing,
    }
    samples: dict[str, dict[tuple[str, ...], float]] = {
        name: {(): float(value)} for name, value in scalars.items()
    }
    samples["adaptive_baseline_seconds"] = {
        (level,): baseline for level, baseline in adaptive.baselines.items()
    }
    return samples


def collect_adaptive(families: FamilyBuilder, adaptive: AdaptiveStatistics | None) -> Iterator[Any]:
    """Yield the ``adaptive_*`` families, or nothing when the adaptive limit is off.

    Args:
        families: The family builder (name prefix).
        adaptive: The limiter's ``adaptive_concurrency`` (``None`` when off).
    """
    if adaptive is None:
        return
    for name, values in adaptive_samples(adaptive).items():
        yield families.values(metric(name), values)
