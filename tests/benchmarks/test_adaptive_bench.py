"""A quick run of the adaptive benchmark: the learned limit finds the knee from both sides."""

from __future__ import annotations

import pytest

from benchmarks.adaptive_bench import knee, restart
from benchmarks.adaptive_pool import closed_loop
from benchmarks.adaptive_sim import Result


@pytest.mark.parametrize("start_factor", [10.0, 0.2])
def test_the_default_algorithm_finds_the_knee_within_a_minute(start_factor: float) -> None:
    row = knee("Gradient", capacity=10, start_factor=start_factor, duration=90.0)
    assert row["passes"], row
    assert 8 <= row["final_limit"] <= 15


@pytest.mark.parametrize("algorithm", ["Gradient", "AIMD"])
def test_a_restart_under_full_load_finds_the_knee_and_follows_it_down(algorithm: str) -> None:
    # Every closed-loop client at once at 10 × C: the first baseline is learned at 5 × C in
    # flight, and only a probe below it lets the limit come down (it stayed at ~10 × C).
    row = restart(algorithm, capacity=10, clients=50, halve_at=60.0, duration=90.0)
    assert row["passes"], row
    assert row["settled_after"] <= 60.0 and row["halved_settled_after"] <= 30.0
    assert row["probes"] >= 1 and row["probe_cost"] <= 0.05 and row["probe_rejected"] == 0


def test_a_strict_pool_s_tail_grows_past_its_size_at_the_same_throughput() -> None:
    # What criterion (f) over HTTP misses, in fake time: ServerCL above the pool costs p99.
    at_size = closed_loop(20, duration=20.0, warmup=5.0)
    above = closed_loop(30, duration=20.0, warmup=5.0)
    assert abs(at_size["rps"] - above["rps"]) < 1.0
    assert above["p99"] > 1.2 * at_size["p99"], (at_size, above)
    assert closed_loop(30, duration=20.0, warmup=5.0) == above  # exact, repeatable


def test_the_p99_series_has_one_point_per_second_with_completions() -> None:
    result = Result(3.0)
    result.completed = [
        (0.2, "api", 0.1, 0.05),
        (0.7, "api", 0.3, 0.2),
        (2.5, "api", 0.4, 0.1),
    ]
    assert result.p99_series() == [(0.0, 0.3), (2.0, 0.4)]
    assert result.p99_series(execution=True) == [(0.0, 0.2), (2.0, 0.1)]
