"""The adaptive limit's learning (``engine/_adaptive.py``): baselines, the ratio, algorithms."""

from __future__ import annotations

import pytest

from apf_limiter.config._model import AdaptiveConcurrency
from apf_limiter.engine._adaptive import AIMD, MIN_SAMPLES, AdaptiveLimit, Gradient


def _feed(learned: AdaptiveLimit, level: str, latency: float, count: int, seats: int = 1) -> None:
    for _ in range(count):
        learned.sample(level, latency, seats)


def test_each_level_is_measured_against_its_own_baseline() -> None:
    # Two levels ten times apart in service time, both at their baselines: the ratio is 1,
    # not a mix of 0.1 s and 1 s read as congestion.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 100, now=0.0)
    _feed(learned, "fast", 0.1, 20)
    _feed(learned, "slow", 1.0, 20)
    assert learned.update(1.0, seats_in_use=100, waiting=5) is not None  # healthy: it grows
    assert learned.baselines == {"fast": 0.1, "slow": 1.0}
    assert learned.last_ratio == pytest.approx(1.0)
    assert learned.last_latency == 1.0


def test_latency_over_the_baseline_lowers_the_limit_and_seats_weigh_samples() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(smoothing=1.0), 100, now=0.0)
    _feed(learned, "api", 0.1, 20)
    learned.update(1.0, seats_in_use=100, waiting=5)
    learned.limit = 100.0
    # Twice the baseline, by a 3-seat request and ten 1-seat ones at the baseline: the ratio
    # is (3 × 2 + 10 × 1) / 13.
    _feed(learned, "api", 0.2, 1, seats=3)
    _feed(learned, "api", 0.1, 10)
    assert learned.update(2.0, seats_in_use=100, waiting=5) is not None
    assert learned.last_ratio == pytest.approx(16 / 13)
    # Gradient: limit × tolerance / ratio.
    assert learned.limit == pytest.approx(100 * 1.3 / (16 / 13))
    _feed(learned, "api", 0.4, MIN_SAMPLES)  # four times the baseline: halved at most
    before = learned.limit
    learned.update(3.0, seats_in_use=100, waiting=5)
    assert learned.limit == pytest.approx(before * 0.5)


def test_updates_wait_for_enough_samples_and_their_interval() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(update_interval=2.0), 50, now=0.0)
    assert learned.next_update == 2.0
    _feed(learned, "api", 0.1, MIN_SAMPLES - 1)
    assert learned.update(2.0, seats_in_use=50, waiting=1) is None
    assert learned.updates == 0 and learned.next_update == 4.0
    _feed(learned, "api", 0.1, 1)  # the samples kept add up
    learned.update(4.0, seats_in_use=50, waiting=1)
    assert learned.updates == 1


def test_an_idle_limit_does_not_grow_and_bounds_hold() -> None:
    settings = AdaptiveConcurrency(min_limit=8, max_limit=12, smoothing=1.0)
    learned = AdaptiveLimit(settings, 10, now=0.0)
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    assert learned.update(1.0, seats_in_use=2, waiting=0) is None  # low latency, not busy
    assert learned.limit == 10
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    assert learned.update(2.0, seats_in_use=10, waiting=3) == 12  # 10 × 1.3, capped
    _feed(learned, "api", 1.0, MIN_SAMPLES)
    assert learned.update(3.0, seats_in_use=12, waiting=3) == 8  # halved, floored


def test_the_baseline_forgets_what_is_older_than_its_window() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(baseline_window=10.0), 50, now=0.0)
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    learned.update(1.0, seats_in_use=50, waiting=1)
    _feed(learned, "api", 0.3, MIN_SAMPLES)
    learned.update(5.0, seats_in_use=50, waiting=1)
    assert learned.baselines["api"] == 0.1
    _feed(learned, "api", 0.3, MIN_SAMPLES)
    learned.update(11.5, seats_in_use=50, waiting=1)
    assert learned.baselines["api"] == 0.3


def test_aimd_adds_when_healthy_and_multiplies_down_when_not() -> None:
    aimd = AIMD(AdaptiveConcurrency(smoothing=0.5, backoff=0.8))
    assert aimd.next_limit(100.0, 1.0, busy=True) == 105.0  # 0.5 × √100
    assert aimd.next_limit(4.0, 1.0, busy=True) == 5.0  # at least 1
    assert aimd.next_limit(100.0, 1.0, busy=False) == 100.0
    assert aimd.next_limit(100.0, 1.5, busy=False) == 80.0
    gradient = Gradient(AdaptiveConcurrency(tolerance=1.5, smoothing=0.5))
    assert gradient.next_limit(100.0, 3.0, busy=True) == 75.0  # halfway to 100 × 1.5 / 3


def test_reloaded_settings_keep_the_learned_limit_within_the_new_bounds() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(), 40, now=0.0)
    learned.configure(AdaptiveConcurrency(max_limit=30, algorithm="AIMD"))
    assert learned.limit == 30 and learned.applied == 30
    assert isinstance(learned._algorithm, AIMD)
