"""Seat-second arithmetic: unsigned 64-bit fixed point, as Kubernetes does it.

Work is measured in "seat-seconds" held in an unsigned 64-bit integer with 10**8 units per
seat-second (one unit is 10 ns of one seat). Kubernetes relies on modulo-2**64 wraparound (for
example, a negative duration in the service-time correction wraps to add instead of subtract),
so every value here is reduced with :data:`MASK`. Durations are integer nanoseconds.
"""

from __future__ import annotations

import math
from typing import Final

SCALE: Final = 100_000_000
"""Units per seat-second."""

MASK: Final = (1 << 64) - 1
MAX_SEAT_SECONDS: Final = MASK
R_DECREMENT: Final = MAX_SEAT_SECONDS // 2
"""How far an epoch advance winds the virtual clock back (9223372036854775807)."""
HIGH_R: Final = R_DECREMENT + R_DECREMENT // 2
"""The virtual time at which an epoch advance happens (13835058055282163710)."""

ESTIMATED_SERVICE_NS: Final = 3_000_000
"""G: the fixed estimate of a request's service time, 3 ms."""


def go_round(x: float) -> int:
    """Round half away from zero, exactly like Go's ``math.Round``.

    Python's :func:`round` rounds half to even, which differs on values such as 24.5.
    """
    t = math.trunc(x)
    # x - t is exact in binary floating point, so the comparison has no rounding error.
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return int(t)


def seats_times_duration(seats: float, duration_ns: int) -> int:
    """Return ``seats × duration`` in seat-second units, wrapped modulo 2**64.

    A negative duration yields the two's-complement encoding, which Kubernetes relies on.
    """
    return go_round(seats * float(duration_ns) / 10.0) & MASK


def duration_per_seat(work: int, seats: float) -> int:
    """Return how long ``seats`` seats take to deliver ``work`` units, in nanoseconds.

    Truncates toward zero, as the Go conversion to ``time.Duration`` does. The work becomes a
    float first, as Go's ``float64(ss)`` does (an exact int / int division would differ above
    2**53 units).
    """
    return math.trunc(float(work) / seats * 10.0)


def seat_seconds_str(units: int) -> str:
    """Format seat-second units as Kubernetes does, e.g. ``12.30000000ss``."""
    whole, frac = divmod(units & MASK, SCALE)
    return f"{whole}.{frac:08d}ss"


def seat_seconds_float(units: int) -> float:
    """Convert seat-second units to a float number of seat-seconds."""
    return (units & MASK) / SCALE


def to_nanoseconds(seconds: float) -> int:
    """Convert seconds to integer nanoseconds (the nearest; halves away from zero).

    ``int(x + 0.5)`` rather than ``round(x)``: the same in pure Python, and in the mypyc build a
    native conversion instead of a call into the interpreter (about 90 ns). The engine's hot
    paths inline it for durations and clock readings that cannot be negative.
    """
    ns = seconds * 1e9
    return int(ns + 0.5) if ns >= 0 else -int(0.5 - ns)
