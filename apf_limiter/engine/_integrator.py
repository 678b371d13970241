"""Time integration of a piecewise-constant value (a level's seat demand).

Kubernetes samples each level's seat demand (seats in use plus seats waiting) on every change
and integrates it over time; each borrowing adjustment reads and resets the integral.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from apf_limiter.engine._seat_seconds import to_nanoseconds

_SECOND_NS = 1_000_000_000


def _seconds(elapsed_ns: int) -> float:
    """Go's ``Duration.Seconds()``: whole seconds plus the remaining nanoseconds / 1e9."""
    seconds, nanoseconds = divmod(elapsed_ns, _SECOND_NS)
    return seconds + nanoseconds / 1e9


@dataclass(frozen=True, slots=True)
class IntegratorResults:
    """What an integrator saw over a period.

    Attributes:
        duration: Length of the period in seconds.
        average: Time-weighted average (NaN when the duration is not positive).
        deviation: Time-weighted standard deviation (NaN when the duration is not positive or
            floating-point error makes the variance negative).
        min: Smallest value seen (a fresh integrator starts at 0).
        max: Largest value seen (a fresh integrator starts at 0).
    """

    duration: float
    average: float
    deviation: float
    min: float
    max: float


class Integrator:
    """Integrates ``x`` over time with the exact semantics of the Kubernetes integrator.

    ``min`` and ``max`` start at 0 (not at the first sample); :meth:`reset` seeds both with
    the current value. Time is kept in integer nanoseconds, as Go's ``time.Time`` is, and each
    interval converted to seconds as Go's ``Duration.Seconds()`` does: intervals given as
    float seconds (1.001 to 1.002, say) then integrate exactly as their nanoseconds would.

    Args:
        now: The start time, in seconds.
    """

    __slots__ = ("last_ns", "x", "duration", "integral", "integral_of_squares", "min", "max")

    def __init__(self, now: float) -> None:
        self.last_ns = to_nanoseconds(now)
        self.x = 0.0
        self.duration = 0.0
        self.integral = 0.0
        self.integral_of_squares = 0.0
        self.min = 0.0
        self.max = 0.0

    def _update(self, now: float) -> None:
        now_ns = to_nanoseconds(now)
        elapsed = now_ns - self.last_ns
        if elapsed > 0:
            dt = elapsed / 1e9 if elapsed < _SECOND_NS else _seconds(elapsed)
            x = self.x
            self.duration += dt
            self.integral += x * dt
            self.integral_of_squares += x * x * dt
        self.last_ns = now_ns

    def set(self, x: float, now: float) -> None:
        """Integrate the old value up to ``now``, then take ``x`` as the new value."""
        # _update, inlined: this runs on every change of a level's seat demand. So is
        # to_nanoseconds, for a clock reading (never negative).
        now_ns = int(now * 1e9 + 0.5)
        elapsed = now_ns - self.last_ns
        if elapsed > 0:
            dt = elapsed / 1e9 if elapsed < _SECOND_NS else _seconds(elapsed)
            old = self.x
            self.duration += dt
            self.integral += old * dt
            self.integral_of_squares += old * old * dt
        self.last_ns = now_ns
        self.x = x
        if x < self.min:
            self.min = x
        if x > self.max:
            self.max = x

    def add(self, delta: float, now: float) -> None:
        """Change the value by ``delta`` at ``now``."""
        self.set(self.x + delta, now)

    def results(self, now: float) -> IntegratorResults:
        """Return the results of the period so far (integrating up to ``now``)."""
        self._update(now)
        return self._results()

    def _results(self) -> IntegratorResults:
        duration = self.duration
        if duration <= 0:
            return IntegratorResults(duration, math.nan, math.nan, self.min, self.max)
        average = self.integral / duration
        variance = self.integral_of_squares / duration - average * average
        deviation = math.sqrt(variance) if variance >= 0 else math.nan
        return IntegratorResults(duration, average, deviation, self.min, self.max)

    def reset(self, now: float) -> IntegratorResults:
        """Return the results of the period and start a new one with min = max = x."""
        self._update(now)
        results = self._results()
        self.duration = 0.0
        self.integral = 0.0
        self.integral_of_squares = 0.0
        self.min = self.x
        self.max = self.x
        return results
