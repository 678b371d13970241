from __future__ import annotations

import math

import pytest

from apf_limiter.engine.integrator import Integrator


def test_kubernetes_integrator_vector() -> None:
    igr = Integrator(0.0)
    igr.add(3, 0.0)
    results = igr.results(1.0)
    assert (results.duration, results.average, results.deviation) == (1.0, 3.0, 0.0)
    assert (results.min, results.max) == (0.0, 3.0)  # min starts at 0, not at the sample
    reset = igr.reset(1.0)
    assert reset == results
    igr.set(2, 1.0)
    fresh = igr.results(1.0)
    assert fresh.duration == 0
    assert math.isnan(fresh.average) and math.isnan(fresh.deviation)
    assert (fresh.min, fresh.max) == (2.0, 3.0)
    igr.add(-1, 1.001)  # x was 2 for 1 ms, now 1
    later = igr.results(1.002)
    assert later.duration == pytest.approx(0.002)
    assert later.average == pytest.approx(1.5)
    assert later.deviation == pytest.approx(0.5)
    assert (later.min, later.max) == (1.0, 3.0)
