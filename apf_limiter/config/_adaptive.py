"""Reading and checking ``adaptiveConcurrency``, the adaptive server limit's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apf_limiter.config._model import AdaptiveConcurrency
from apf_limiter.config._settings import ADAPTIVE_ALGORITHMS

if TYPE_CHECKING:
    from apf_limiter.config._fields import Reader
    from apf_limiter.config._problems import Problems

#: The keys of ``adaptiveConcurrency``, in the order problems list them.
ADAPTIVE_KEYS: tuple[str, ...] = (
    "minLimit",
    "maxLimit",
    "initialLimit",
    "algorithm",
    "updateInterval",
    "tolerance",
    "smoothing",
    "backoff",
    "baselineWindow",
)
#: Updates far more often than this would see too few requests to measure anything.
MIN_UPDATE_INTERVAL = 0.01


def read_adaptive(reader: Reader | None, problems: Problems) -> AdaptiveConcurrency | None:
    """Read and check ``adaptiveConcurrency``; ``None`` when it is absent (the feature is off).

    Args:
        reader: Reader of the document holding the settings, or ``None`` when none does.
        problems: Where problems are recorded.
    """
    if reader is None:
        return None
    section = reader.mapping("adaptiveConcurrency", ADAPTIVE_KEYS)
    if section is None:
        return None
    default = AdaptiveConcurrency()
    min_limit = section.integer("minLimit")
    if min_limit is None:
        min_limit = default.min_limit
    elif min_limit < 1:
        problems.invalid(section.child_path("minLimit"), min_limit, "must be positive")
    max_limit = section.integer("maxLimit")
    if max_limit is None:
        max_limit = default.max_limit
    elif max_limit < max(min_limit, 1):
        problems.invalid(
            section.child_path("maxLimit"), max_limit, "must not be less than minLimit"
        )
    initial = section.integer("initialLimit")
    if initial is not None and not min_limit <= initial <= max_limit:
        problems.invalid(
            section.child_path("initialLimit"), initial, "must be within minLimit..maxLimit"
        )
    algorithm = section.string("algorithm")
    if algorithm is None:
        algorithm = default.algorithm
    elif algorithm not in ADAPTIVE_ALGORITHMS:
        problems.not_supported(section.child_path("algorithm"), algorithm, ADAPTIVE_ALGORITHMS)
    interval = _number(section, "updateInterval", default.update_interval)
    if interval < MIN_UPDATE_INTERVAL:
        problems.invalid(
            section.child_path("updateInterval"),
            interval,
            f"must be at least {MIN_UPDATE_INTERVAL:g} (seconds)",
        )
    tolerance = _number(section, "tolerance", default.tolerance)
    if tolerance <= 1:
        problems.invalid(section.child_path("tolerance"), tolerance, "must be greater than 1")
    smoothing = _number(section, "smoothing", default.smoothing)
    if not 0 < smoothing <= 1:
        problems.invalid(section.child_path("smoothing"), smoothing, "must be within (0, 1]")
    backoff = _number(section, "backoff", default.backoff)
    if not 0 < backoff < 1:
        problems.invalid(section.child_path("backoff"), backoff, "must be within (0, 1)")
    window = _number(section, "baselineWindow", default.baseline_window)
    if window < interval:
        problems.invalid(
            section.child_path("baselineWindow"), window, "must not be less than updateInterval"
        )
    return AdaptiveConcurrency(
        min_limit=min_limit,
        max_limit=max_limit,
        initial_limit=initial,
        algorithm=algorithm,
        update_interval=interval,
        tolerance=tolerance,
        smoothing=smoothing,
        backoff=backoff,
        baseline_window=window,
    )


def _number(section: Reader, key: str, default: float) -> float:
    """``key`` as a number, or ``default`` when absent or of the wrong type (reported)."""
    value = section.number(key)
    return default if value is None else value


def serialize_adaptive(adaptive: AdaptiveConcurrency) -> dict[str, object]:
    """``adaptiveConcurrency`` in the configuration shape (every field explicit)."""
    dumped: dict[str, object] = {"minLimit": adaptive.min_limit, "maxLimit": adaptive.max_limit}
    if adaptive.initial_limit is not None:
        dumped["initialLimit"] = adaptive.initial_limit
    dumped.update(
        algorithm=adaptive.algorithm,
        updateInterval=adaptive.update_interval,
        tolerance=adaptive.tolerance,
        smoothing=adaptive.smoothing,
        backoff=adaptive.backoff,
        baselineWindow=adaptive.baseline_window,
    )
    return dumped
