"""The adaptive server limit's signal: per-level baselines of execution time (pure, sans-IO).

``engine/_adaptive.py`` (``AdaptiveLimit``) collects each level's samples and, per update,
folds them here. The signal copes with APF's mixed traffic: levels have different service
times, so each level is compared with its own *baseline*. Per level, an update's *estimate*
is the mean execution time of at least :data:`MIN_SAMPLES` samples (kept across updates until
there are that many), and the baseline is the same statistic learned while the backend kept
up, so the two compare like with like whatever the spread of service times: a
processor-sharing backend past its knee stretches every request by the same factor, and the
mean with them. The update's *latency ratio* is the seat-weighted mean over the levels of
estimate / baseline: about 1 while the backend keeps up, growing with the excess in flight
once it queues.

The baseline is not a minimum over a window of noisy estimates (whose bias grows with their
noise, and would read a wide spread of service times as congestion). It is a pooled,
precision-weighted mean that moves on evidence only (see :func:`fold`):

* an estimate significantly lower (by :data:`Z` standard errors) replaces it: the backend
  got faster, or the baseline was learned congested;
* one at most the baseline, or within the noise at no more concurrency than the baseline
  was learned at, is pooled into it: noise averages out instead of ratcheting it down;
* one higher at more concurrency is congestion, and does not move it (significantly higher
  lowers the concurrency at which the baseline counts as learned).

Pooled evidence fades over ``baselineWindow``. A service slower for good reads as congestion
until the limit reaches ``minLimit``, where no lower concurrency can be tried and whatever
runs is pooled: it is learned there. The first baseline comes
from a level's earliest samples (:func:`seed`): while the server is still filling up they
ran at the lowest concurrency, and once concurrency stops rising they are all alike and the
seed waits until it is precise. A first baseline learned with every client already running
(a restart under full load) is not, and only a probe (``engine/_adaptive.py``) sees below it:
``Level.seen`` records the lowest concurrency a baseline rests on evidence from.
"""

from __future__ import annotations

import math
from typing import Final

#: Per level, an estimate needs at least this many samples; fewer are kept for the next one.
MIN_SAMPLES: Final = 10
#: Relative standard error at which a mean is precise enough: an estimate waits for the
#: samples that take (``cv² / PRECISION²``: 10 for ±10% service times, 400 for exponential
#: ones), within :data:`MIN_SAMPLES`..:data:`MAX_SAMPLES`.
PRECISION: Final = 0.05
#: An estimate never waits for more samples than this (±10% for exponential service times:
#: waiting longer at a low limit would stall the limit's growth).
MAX_SAMPLES: Final = 100
#: A first baseline is taken from at least this many samples, and waits for at most
#: :data:`SEED_SAMPLES` of them (±5% for exponential service times) while the limit is full.
SEED_MIN: Final = 5
SEED_SAMPLES: Final = 4 * MAX_SAMPLES
#: Standard errors apart that make an estimate significantly different from the baseline.
Z: Final = 3.0


class Level:
    """One level: its samples since its last estimate, and its baseline.

    Attributes:
        latencies: Execution times since the last estimate (completion order), seconds.
        seats: Their seats.
        baseline: The baseline mean execution time (seconds; 0 until the first estimate).
        weight: The samples pooled into it, fading over ``baselineWindow`` (0: none yet;
            an estimate that replaces the baseline replaces its weight too, and one that
            is not pooled adds none: the weight is the evidence the baseline rests on).
        cv2: The squared coefficient of variation of its samples, pooled the same way: the
            noise of a mean of ``n`` samples is ``baseline × √(cv2 / n)``.
        concurrency: The concurrency the baseline was learned at, lowered when congestion
            shows above it: estimates at no more than it are pooled both ways.
        estimated: When it last took an estimate.
        seen: The lowest concurrency the baseline rests on evidence from (a probe looks
            below it when it is not under the concurrency that runs).
    """

    __slots__ = (
        "baseline",
        "concurrency",
        "cv2",
        "estimated",
        "latencies",
        "seats",
        "seen",
        "weight",
    )

    def __init__(self, now: float) -> None:
        self.latencies: list[float] = []
        self.seats: list[int] = []
        self.baseline = 0.0
        self.weight = 0.0
        self.cv2 = 0.0
        self.concurrency = 0
        self.seen = 0
        self.estimated = now


def required(level: Level) -> int:
    """The samples an estimate of ``level`` waits for: as many as make its mean precise."""
    if level.weight <= 0.0:
        return MIN_SAMPLES
    needed = math.ceil(level.cv2 / (PRECISION * PRECISION))
    return min(max(needed, MIN_SAMPLES), MAX_SAMPLES)


def seed(level: Level, latencies: list[float], ramping: bool) -> bool:
    """Take a level's first baseline from its earliest samples; ``False``: wait for more.

    The shortest prefix (at least :data:`SEED_MIN`) whose mean is :data:`PRECISION` precise.
    Failing that, while concurrency is rising (the server is filling up: later samples ran
    more congested) the first :data:`MAX_SAMPLES`; while it is not, all samples up to
    :data:`SEED_SAMPLES`, waiting for them.
    """
    total = square = 0.0
    for count, latency in enumerate(latencies, 1):
        total += latency
        square += latency * latency
        if count < SEED_MIN:
            continue
        mean = total / count
        variance = max(0.0, square / count - mean * mean)
        precise = variance <= (PRECISION * mean) ** 2 * count
        if precise or count >= SEED_SAMPLES or (ramping and count >= MAX_SAMPLES):
            level.baseline = mean
            level.weight = float(count)
            level.cv2 = variance / (mean * mean) if mean > 0.0 else 0.0
            return True
    return False


def fold(
    level: Level, now: float, window: float, concurrency: int, pool: bool, floored: bool
) -> float:
    """Fold a level's samples into its baseline (see the module docstring); their mean.

    ``pool`` is false for the samples a first baseline was just taken from: they are in it
    already, and only say whether the rest of them ran congested. ``floored``: the limit is
    at ``minLimit``, the lowest concurrency there is, so whatever runs there is pooled (a
    service slower for good is learned there rather than read as congestion forever).
    """
    latencies = level.latencies
    n = len(latencies)
    mean = sum(latencies) / n
    # Evidence fades over the window: an old baseline yields to new estimates.
    weight = level.weight * (1.0 - min(1.0, (now - level.estimated) / window))
    level.estimated = now
    baseline = level.baseline
    # The standard error of estimate - baseline, from the pooled spread (not this estimate's
    # own: for skewed times a low mean comes with a low spread, and would look significant).
    band = Z * baseline * math.sqrt(level.cv2 * (1.0 / n + 1.0 / max(weight, 1.0)))
    if not pool:
        if mean > baseline + band:
            level.concurrency = concurrency - 1
        return mean
    if mean > 0.0:
        variance = max(0.0, sum(x * x for x in latencies) / n - mean * mean)
        level.cv2 += n / (weight + n) * (variance / (mean * mean) - level.cv2)
    level.weight = weight
    if mean < baseline - band:
        level.baseline, level.weight = mean, float(n)
        level.concurrency = level.seen = concurrency
    elif (
        mean <= baseline
        or floored
        or (concurrency <= level.concurrency and mean <= baseline + band)
    ):
        level.baseline = (weight * baseline + n * mean) / (weight + n)
        level.weight = weight + n
        level.seen = min(level.seen, concurrency)
    elif mean > baseline + band:
        # Congested at this concurrency: the baseline holds only below it.
        level.concurrency = min(level.concurrency, concurrency - 1)
    return mean
