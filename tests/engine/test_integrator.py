from __future__ import annotations

import math

import pytest

from apf_limiter.engine._integrator import Integrator


@pytest.mark.parametrize("t0", [0.0, 1.0, 1000.0, 12345.678, 86400.25])
def test_kubernetes_integrator_vector(t0: float) -> None:
    # Exact, whatever the start: time is integrated in nanoseconds, as in Go. (In float
    # seconds, (t0 + 0.002) - (t0 + 0.001) is not 0.001 and the average is not 1.5.)
    igr = Integrator(t0)
    igr.add(3, t0)
    results = igr.results(t0 + 1.0)
    assert (results.duration, results.average, results.deviation) == (1.0, 3.0, 0.0)
    assert (results.min, results.max) == (0.0, 3.0)  # min starts at 0, not at the sample
    reset = igr.reset(t0 + 1.0)
    assert reset == results
    igr.set(2, t0 + 1.0)
    fresh = igr.results(t0 + 1.0)
    assert fresh.duration == 0
    assert math.isnan(fresh.average) and math.isnan(fresh.deviation)
    assert (fresh.min, fresh.max) == (2.0, 3.0)
    igr.add(-1, t0 + 1.001)  # x was 2 for 1 ms, now 1
    later = igr.results(t0 + 1.002)
    assert (later.duration, later.average, later.deviation) == (0.002, 1.5, 0.5)
    assert (later.min, later.max) == (1.0, 3.0)


def test_intervals_convert_to_seconds_as_go_does() -> None:
    # Go's Duration.Seconds() is whole seconds + remaining nanoseconds / 1e9, which for
    # some intervals differs in the last bit from nanoseconds / 1e9.
    elapsed_ns = 448_094_843_075
    go_seconds = 448 + 94_843_075 / 1e9
    assert go_seconds != elapsed_ns / 1e9
    igr = Integrator(0.0)
    igr.set(1, 0.0)
    assert igr.results(elapsed_ns / 1e9).duration == go_seconds
