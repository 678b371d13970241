"""The adaptive server limit: a ServerCL learned from execution latency (pure, sans-IO).

The shell feeds :class:`AdaptiveLimit` one sample per request that ran (its level, execution
time and seats) and calls :meth:`AdaptiveLimit.update` on its housekeeping schedule; a new
limit is then applied as a new ServerCL, so APF divides whatever total is current.

The signal copes with APF's mixed traffic: levels have different service times, so each
sample is compared with its own level's *baseline*, the lowest per-update 1st percentile of
that level's execution times over ``baselineWindow``. The update's *latency ratio* is the
seat-weighted mean of latency / baseline: about 1 while the backend keeps up, and growing with
the excess in flight once it queues internally (processor sharing: latency ∝ in flight).
The algorithms only see that ratio, so one interface serves both.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final, Protocol

from apf_limiter.config._model import AdaptiveConcurrency

#: Fewer samples than this in an update are kept for the next one (a ratio from a handful of
#: requests is noise).
MIN_SAMPLES: Final = 10
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
        baselines: Per level, its baseline execution time (seconds).
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
        self._samples = 0
        self._latencies: dict[str, list[float]] = {}
        self._seats: dict[str, list[int]] = {}
        # Per level, (update time, that update's 1st percentile), over baselineWindow.
        self._floors: dict[str, deque[tuple[float, float]]] = {}

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
        latencies = self._latencies.get(level)
        if latencies is None:
            latencies = self._latencies[level] = []
            self._seats[level] = []
        latencies.append(latency)
        self._seats[level].append(seats)
        self._samples += 1
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
        if self._samples < MIN_SAMPLES:
            return None
        weighted = 0.0
        total_seats = 0
        horizon = now - settings.baseline_window
        for level, latencies in self._latencies.items():
            floors = self._floors.get(level)
            if floors is None:
                floors = self._floors[level] = deque()
            floors.append((now, _first_percentile(latencies)))
            while floors[0][0] <= horizon:
                floors.popleft()
            baseline = min(floor for _, floor in floors)
            self.baselines[level] = baseline
            if baseline <= 0.0:
                continue  # instant requests say nothing about the backend
            for latency, seats in zip(latencies, self._seats[level], strict=True):
                weighted += seats * latency / baseline
                total_seats += seats
        self._latencies.clear()
        self._seats.clear()
        self._samples = 0
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


def _first_percentile(values: list[float]) -> float:
    return sorted(values)[len(values) // 100]


def _rounded(limit: float) -> int:
    return max(1, math.floor(limit + 0.5))
