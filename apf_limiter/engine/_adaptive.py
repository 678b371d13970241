"""The adaptive server limit: a ServerCL learned from execution latency (pure, sans-IO).

The shell feeds :class:`AdaptiveLimit` one sample per request that ran (its level, execution
time and seats) and calls :meth:`AdaptiveLimit.update` on its housekeeping schedule; a new
limit is then applied as a new ServerCL, so APF divides whatever total is current.

The signal copes with APF's mixed traffic: levels have different service times, so each
level is compared with its own *baseline*. Per level, an update's *estimate* is the mean
execution time of at least :data:`MIN_SAMPLES` samples (kept across updates until there are
that many), and the baseline is the same statistic learned while the backend kept up, so the
two compare like with like whatever the spread of service times: a processor-sharing backend
past its knee stretches every request by the same factor, and the mean with them. The
update's *latency ratio* is the seat-weighted mean over the levels of estimate / baseline:
about 1 while the backend keeps up, growing with the excess in flight once it queues.

The baseline is not a minimum over a window of noisy estimates (whose bias grows with their
noise, and would read a wide spread of service times as congestion). It is a pooled,
precision-weighted mean that moves on evidence only (see :func:`_fold`):

* an estimate significantly lower (by :data:`Z` standard errors) replaces it: the backend
  got faster, or the baseline was learned congested;
* one at most the baseline, or within the noise at no more concurrency than the baseline
  was learned at, is pooled into it: noise averages out instead of ratcheting it down;
* one higher at more concurrency is congestion, and does not move it (significantly higher
  lowers the concurrency at which the baseline counts as learned).

Pooled evidence fades over ``baselineWindow``. A service slower for good reads as congestion
until the limit reaches ``minLimit``, where no lower concurrency can be tried and whatever
runs is pooled: it is learned there. The first baseline comes
from a level's earliest samples (:func:`_seed`): while the server is still filling up they
ran at the lowest concurrency, and once concurrency stops rising they are all alike and the
seed waits until it is precise. The algorithms only see the ratio, so one interface serves
both.
"""

from __future__ import annotations

import math
from typing import Final, Protocol

from apf_limiter.config._model import AdaptiveConcurrency

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
#: ServerCL moves only once the learned limit is this fraction of it (at least one seat)
#: away: every move re-plans the levels, so a limit hovering between two values must not
#: flip between them at every update.
HYSTERESIS: Final = 0.03
#: Per update, a gradient may at most halve or double the target.
_MIN_GRADIENT: Final = 0.5
_MAX_GRADIENT: Final = 2.0


class Algorithm(Protocol):
    """What an adaptive algorithm does: the next limit from the current one and the signal."""

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """The next (unclamped) limit.

        Args:
            limit: The current learned limit.
            ratio: The latency ratio of the update (about 1 when healthy).
            busy: Whether the limit is in use (requests wait, or half the seats are held):
                without that, low latency says nothing about a higher limit.
        """
        ...


class Gradient:
    """Gradient (Netflix Gradient2, Envoy): move a fraction of the way to limit × tolerance/ratio.

    The fixed point under overload is where ratio = tolerance: with latency ∝ in flight past
    the knee, about ``tolerance`` × the knee over the baseline's noise floor.
    """

    def __init__(self, settings: AdaptiveConcurrency) -> None:
        self._tolerance = settings.tolerance
        self._smoothing = settings.smoothing

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """See :meth:`Algorithm.next_limit`."""
        gradient = min(max(self._tolerance / ratio, _MIN_GRADIENT), _MAX_GRADIENT)
        if gradient > 1.0 and not busy:
            return limit
        return limit + self._smoothing * (limit * gradient - limit)


class AIMD:
    """Additive increase (smoothing × √limit, at least 1), multiplicative decrease (backoff)."""

    def __init__(self, settings: AdaptiveConcurrency) -> None:
        self._tolerance = settings.tolerance
        self._smoothing = settings.smoothing
        self._backoff = settings.backoff

    def next_limit(self, limit: float, ratio: float, busy: bool) -> float:
        """See :meth:`Algorithm.next_limit`."""
        if ratio > self._tolerance:
            return limit * self._backoff
        if not busy:
            return limit
        return limit + max(1.0, self._smoothing * math.sqrt(limit))


def make_algorithm(settings: AdaptiveConcurrency) -> Algorithm:
    """The algorithm ``settings`` name."""
    if settings.algorithm == "AIMD":
        return AIMD(settings)
    return Gradient(settings)


class _Level:
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
    """

    __slots__ = ("baseline", "concurrency", "cv2", "estimated", "latencies", "seats", "weight")

    def __init__(self, now: float) -> None:
        self.latencies: list[float] = []
        self.seats: list[int] = []
        self.baseline = 0.0
        self.weight = 0.0
        self.cv2 = 0.0
        self.concurrency = 0
        self.estimated = now


class AdaptiveLimit:
    """The learned limit, the samples since the last update and the per-level baselines.

    Args:
        settings: The ``adaptiveConcurrency`` settings.
        server_concurrency_limit: The configured ServerCL (the start, unless ``initialLimit``).
        now: The current time, in seconds.

    Attributes:
        limit: The learned limit (unrounded).
        applied: The limit in force as ServerCL (``limit`` rounded, when it moved at least
            :data:`HYSTERESIS` away).
        next_update: When the next update falls due.
        baselines: Per level, its baseline mean execution time (seconds).
        last_ratio: The latency ratio of the last update (0 before the first).
        last_latency: The execution time of the last sample (seconds).
        updates: Updates that had enough samples to run the algorithm.
    """

    def __init__(
        self, settings: AdaptiveConcurrency, server_concurrency_limit: int, now: float
    ) -> None:
        self.settings = settings
        self._algorithm = make_algorithm(settings)
        self.applied = settings.start_limit(server_concurrency_limit)
        self.limit = float(self.applied)
        self.next_update = now + settings.update_interval
        self.baselines: dict[str, float] = {}
        self.last_ratio = 0.0
        self.last_latency = 0.0
        self.updates = 0
        self._levels: dict[str, _Level] = {}
        self._started = now
        self._concurrency = 0  # at the last update

    def configure(self, settings: AdaptiveConcurrency) -> None:
        """Take reloaded settings, keeping what was learned (clamped into the new bounds)."""
        if settings == self.settings:
            return
        self.settings = settings
        self._algorithm = make_algorithm(settings)
        self.limit = min(max(self.limit, settings.min_limit), settings.max_limit)
        self.applied = _rounded(self.limit)

    def sample(self, level: str, latency: float, seats: int) -> None:
        """Record one request that ran: its level, execution time (seconds) and seats."""
        state = self._levels.get(level)
        if state is None:
            state = self._levels[level] = _Level(self._started)
        state.latencies.append(latency)
        state.seats.append(seats)
        self.last_latency = latency

    def update(self, now: float, seats_in_use: int, waiting: int) -> int | None:
        """Run one update: fold the samples into the baselines and move the limit.

        Args:
            now: The current time, in seconds.
            seats_in_use: Seats held now at the limited levels.
            waiting: Requests waiting now.

        Returns:
            The new ServerCL when the rounded limit moved, else ``None``.
        """
        settings = self.settings
        self.next_update = now + settings.update_interval
        # The concurrency the samples ran at, at most: what is held, within the limit.
        concurrency = min(self.applied, seats_in_use)
        ramping = concurrency > self._concurrency
        self._concurrency = concurrency
        weighted = 0.0
        total_seats = 0
        for name, level in self._levels.items():
            latencies = level.latencies
            if len(latencies) < _required(level):
                continue  # kept for the next update
            seeding = level.weight <= 0.0 or level.baseline <= 0.0
            if seeding:
                if not _seed(level, latencies, ramping):
                    continue  # the first baseline waits until it is precise
                level.concurrency = concurrency
            baseline = level.baseline
            # At minLimit no lower concurrency can be tried: what runs there is the baseline.
            floored = self.applied <= settings.min_limit
            estimate = _fold(
                level, now, settings.baseline_window, concurrency, not seeding, floored
            )
            self.baselines[name] = level.baseline
            seats = sum(level.seats)
            latencies.clear()
            level.seats.clear()
            if baseline <= 0.0:
                continue  # instant requests say nothing about the backend
            weighted += seats * estimate / baseline
            total_seats += seats
        if total_seats == 0:
            return None
        ratio = weighted / total_seats
        self.last_ratio = ratio
        self.updates += 1
        busy = waiting > 0 or 2 * seats_in_use >= self.limit
        limit = self._algorithm.next_limit(self.limit, ratio, busy)
        self.limit = min(max(limit, float(settings.min_limit)), float(settings.max_limit))
        applied = self.applied
        if abs(self.limit - applied) < max(1.0, HYSTERESIS * applied):
            return None
        self.applied = applied = _rounded(self.limit)
        return applied


def _required(level: _Level) -> int:
    """The samples an estimate of ``level`` waits for: as many as make its mean precise."""
    if level.weight <= 0.0:
        return MIN_SAMPLES
    needed = math.ceil(level.cv2 / (PRECISION * PRECISION))
    return min(max(needed, MIN_SAMPLES), MAX_SAMPLES)


def _seed(level: _Level, latencies: list[float], ramping: bool) -> bool:
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


def _fold(
    level: _Level, now: float, window: float, concurrency: int, pool: bool, floored: bool
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
        level.concurrency = concurrency
    elif (
        mean <= baseline
        or floored
        or (concurrency <= level.concurrency and mean <= baseline + band)
    ):
        level.baseline = (weight * baseline + n * mean) / (weight + n)
        level.weight = weight + n
    elif mean > baseline + band:
        # Congested at this concurrency: the baseline holds only below it.
        level.concurrency = min(level.concurrency, concurrency - 1)
    return mean


def _rounded(limit: float) -> int:
    return max(1, math.floor(limit + 0.5))
