"""A quick run of the adaptive benchmark: the learned limit finds the knee from both sides."""

from __future__ import annotations

import pytest

from benchmarks.adaptive_bench import knee


@pytest.mark.parametrize("start_factor", [10.0, 0.2])
def test_the_default_algorithm_finds_the_knee_within_a_minute(start_factor: float) -> None:
    row = knee("Gradient", capacity=10, start_factor=start_factor, duration=90.0)
    assert row["passes"], row
    assert 8 <= row["final_limit"] <= 15
