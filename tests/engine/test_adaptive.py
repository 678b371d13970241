"""The adaptive limit's learning (``engine/_adaptive.py``): baselines, the ratio, algorithms."""

from __future__ import annotations

import math

import pytest

from apf_limiter.config._model import AdaptiveConcurrency
from apf_limiter.engine._adaptive import (
    AIMD,
    PROBE_AFTER,
    PROBE_CHECK,
    PROBE_SPACING,
    AdaptiveLimit,
    Gradient,
)
from apf_limiter.engine._adaptive_baseline import (
    MAX_SAMPLES,
    MIN_SAMPLES,
    SEED_MIN,
    SEED_SAMPLES,
)


def _feed(learned: AdaptiveLimit, level: str, latency: float, count: int, seats: int = 1) -> None:
    for _ in range(count):
        learned.sample(level, latency, seats)


def _exponential(mean: float, count: int = MAX_SAMPLES) -> list[float]:
    """``count`` exponential quantiles around ``mean`` (CV 1), in a fixed scrambled order."""
    quantiles = [-mean * math.log(1.0 - (i + 0.5) / count) for i in range(count)]
    return [quantiles[(37 * i) % count] for i in range(count)]  # 37 is coprime with 100


def _feed_all(learned: AdaptiveLimit, level: str, latencies: list[float]) -> None:
    for latency in latencies:
        learned.sample(level, latency, 1)


def test_each_level_is_measured_against_its_own_baseline() -> None:
    # Two levels ten times apart in service time, both at their baselines: the ratio is 1,
    # not a mix of 0.1 s and 1 s read as congestion.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 100, now=0.0)
    _feed(learned, "fast", 0.1, 20)
    _feed(learned, "slow", 1.0, 20)
    assert learned.update(1.0, seats_in_use=100, waiting=5) == 106  # 0.3 of the way to 120
    assert learned.baselines == {"fast": pytest.approx(0.1), "slow": pytest.approx(1.0)}
    assert learned.last_ratio == pytest.approx(1.0)
    assert learned.last_latency == 1.0


def test_widely_spread_service_times_read_as_healthy_and_the_limit_grows() -> None:
    # Exponential service times (the mean 100 × the 1st percentile) that do not change: the
    # mean against a mean is 1, where a low percentile for a baseline read ~50 and the limit
    # fell to minLimit.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 20, now=0.0)
    spread = _exponential(0.05)
    for second in range(1, 21):
        _feed_all(learned, "api", spread)
        # The limit is full (requests wait): what runs grows with it, above where the
        # baseline was seen, so no probe is needed.
        learned.update(float(second), seats_in_use=learned.applied, waiting=10)
        assert learned.last_ratio == pytest.approx(1.0)
    assert learned.updates == 20
    assert learned.probes == 0
    assert learned.baselines["api"] == pytest.approx(0.05, rel=0.01)
    assert learned.limit > 20 * 1.05**19  # grows every update, ~6% at a time


def test_levels_weigh_by_their_seats() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(smoothing=1.0), 100, now=0.0)
    _feed(learned, "light", 0.1, 20)
    _feed(learned, "heavy", 0.1, 20, seats=3)
    learned.update(1.0, seats_in_use=100, waiting=5)
    learned.limit = 100.0
    # Twice the baseline at the 1-seat level, at it at the 3-seat one: (20 × 2 + 60) / 80.
    _feed(learned, "light", 0.2, 20)
    _feed(learned, "heavy", 0.1, 20, seats=3)
    assert learned.update(2.0, seats_in_use=100, waiting=5) is not None
    assert learned.last_ratio == pytest.approx(100 / 80)
    # Gradient: limit × tolerance / ratio.
    assert learned.limit == pytest.approx(100 * 1.2 / 1.25)
    _feed(learned, "light", 0.4, MIN_SAMPLES)  # four times the baseline: halved at most
    before = learned.limit
    learned.update(3.0, seats_in_use=100, waiting=5)
    assert learned.last_ratio == pytest.approx(4.0)
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


def test_widely_spread_levels_wait_for_a_precise_mean() -> None:
    # Once a level's spread is known, an estimate waits for the samples that make its mean
    # precise: all of MAX_SAMPLES for exponential times, MIN_SAMPLES for constant ones.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 20, now=0.0)
    spread = _exponential(0.05)
    _feed_all(learned, "spread", spread)
    _feed(learned, "steady", 0.05, MIN_SAMPLES)
    learned.update(1.0, seats_in_use=20, waiting=1)
    assert learned.updates == 1
    _feed_all(learned, "spread", spread[: MAX_SAMPLES - 1])
    assert learned.update(2.0, seats_in_use=20, waiting=1) is None
    assert learned.updates == 1
    _feed(learned, "steady", 0.05, MIN_SAMPLES)
    learned.update(3.0, seats_in_use=20, waiting=1)
    assert learned.updates == 2 and learned._levels["spread"].latencies  # still waiting
    _feed_all(learned, "spread", spread[MAX_SAMPLES - 1 :])
    learned.update(4.0, seats_in_use=20, waiting=1)
    assert learned.updates == 3 and not learned._levels["spread"].latencies


def test_the_first_baseline_comes_from_the_earliest_samples() -> None:
    # The server filling up: the first requests ran alone and precise, later ones congested.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 200, now=0.0)
    _feed(learned, "api", 0.05, 5)
    _feed(learned, "api", 0.2, 95)
    learned.update(1.0, seats_in_use=100, waiting=0)
    assert learned.baselines["api"] == pytest.approx(0.05)
    assert learned.last_ratio == pytest.approx((5 * 0.05 + 95 * 0.2) / 100 / 0.05)


def test_a_spread_first_baseline_waits_while_the_limit_is_full() -> None:
    # While concurrency does not rise the samples are alike: the first baseline waits for
    # SEED_SAMPLES of them rather than take the noisy mean of a first hundred.
    learned = AdaptiveLimit(AdaptiveConcurrency(), 4, now=0.0)
    spread = _exponential(0.05, SEED_SAMPLES)
    _feed_all(learned, "api", spread[:50])
    assert learned.update(1.0, seats_in_use=4, waiting=9) is None  # rising, too few
    for second in range(2, 9):
        start = 50 * (second - 1)
        _feed_all(learned, "api", spread[start : start + 50])
        learned.update(float(second), seats_in_use=4, waiting=9)
        assert learned.updates == (1 if second == 8 else 0)
    # From the shortest prefix that is precise (±5%): most of them.
    assert learned.baselines["api"] == pytest.approx(0.05, rel=0.01)


def test_a_significantly_lower_estimate_replaces_the_baseline() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(), 50, now=0.0)
    _feed(learned, "api", 0.3, MIN_SAMPLES)  # learned congested
    learned.update(1.0, seats_in_use=50, waiting=1)
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    learned.update(2.0, seats_in_use=50, waiting=1)
    assert learned.baselines["api"] == pytest.approx(0.1)
    assert learned.last_ratio == pytest.approx(1 / 3)  # against the baseline it replaced


def test_congestion_at_more_concurrency_does_not_move_the_baseline() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(), 20, now=0.0)
    spread = _exponential(0.05)
    _feed_all(learned, "api", spread)
    learned.update(1.0, seats_in_use=20, waiting=1)
    level = learned._levels["api"]
    assert level.concurrency == 20
    learned.limit = learned.applied = 40
    # Three times slower at 40 in flight: congestion, significantly over the baseline.
    _feed_all(learned, "api", [3 * x for x in spread])
    learned.update(2.0, seats_in_use=40, waiting=1)
    assert learned.baselines["api"] == pytest.approx(0.05, rel=0.01)
    assert learned.last_ratio == pytest.approx(3.0, rel=0.01)
    assert level.concurrency == 20  # learned below 40 already
    # Slightly slower (within the noise of a hundred spread samples) at 30: still held.
    learned.limit = learned.applied = 30
    _feed_all(learned, "api", [1.1 * x for x in spread])
    learned.update(3.0, seats_in_use=30, waiting=1)
    assert learned.baselines["api"] == pytest.approx(0.05, rel=0.01)


def test_a_slower_service_at_no_more_concurrency_is_pooled_into_the_baseline() -> None:
    # Within the noise and at the concurrency the baseline was learned at: not congestion,
    # so it is averaged in, weighted by samples (a noisy first baseline does not stick).
    learned = AdaptiveLimit(AdaptiveConcurrency(), 20, now=0.0)
    spread = _exponential(0.05)
    _feed_all(learned, "api", spread)
    learned.update(1.0, seats_in_use=20, waiting=1)
    mean = sum(spread) / MAX_SAMPLES
    assert learned.baselines["api"] == pytest.approx(mean)  # the first baseline
    _feed_all(learned, "api", [1.1 * x for x in spread])
    learned.update(2.0, seats_in_use=20, waiting=1)
    weight = MAX_SAMPLES * (1.0 - 1.0 / 300.0)  # faded over a second of the window
    expected = (weight * mean + MAX_SAMPLES * 1.1 * mean) / (weight + MAX_SAMPLES)
    assert learned.baselines["api"] == pytest.approx(expected)
    # Significantly slower at that concurrency is congestion: the baseline holds, and is
    # taken as learned below it from now on.
    _feed_all(learned, "api", [2 * x for x in spread])
    learned.update(3.0, seats_in_use=20, waiting=1)
    assert learned.baselines["api"] == pytest.approx(expected)
    assert learned._levels["api"].concurrency == 19


def test_a_service_slower_for_good_is_learned_at_min_limit() -> None:
    # Four times slower at every concurrency: read as congestion, the limit falls to
    # minLimit; there no lower concurrency can be tried, so what runs is the new baseline.
    settings = AdaptiveConcurrency(min_limit=2, smoothing=1.0)
    learned = AdaptiveLimit(settings, 10, now=0.0)
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    learned.update(1.0, seats_in_use=10, waiting=1)
    applied = []
    for second in range(2, 12):
        _feed(learned, "api", 0.4, MIN_SAMPLES)
        learned.update(float(second), seats_in_use=learned.applied, waiting=1)
        applied.append(learned.applied)
        if second == 5:  # the first update at the floor pools the 0.4 s in
            weight = SEED_MIN * (1.0 - 1.0 / 300.0) ** 4  # the first 5 alike made it
            pooled = (weight * 0.1 + MIN_SAMPLES * 0.4) / (weight + MIN_SAMPLES)
            assert learned.baselines["api"] == pytest.approx(pooled)
            assert learned.last_ratio == pytest.approx(4.0)
    assert applied == [6, 3, 2, 2, 2, 2, 2, 2, 2, 3]  # 12 halved twice, floored, regrown
    assert learned.last_ratio < settings.tolerance


def test_pooled_evidence_fades_over_the_baseline_window() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(baseline_window=10.0), 50, now=0.0)
    spread = _exponential(0.1)
    _feed_all(learned, "api", spread)
    learned.update(1.0, seats_in_use=50, waiting=1)
    # A window later the old evidence weighs nothing: the next estimate pooled is the baseline.
    _feed_all(learned, "api", [1.2 * x for x in spread])
    learned.update(11.0, seats_in_use=50, waiting=1)
    assert learned.baselines["api"] == pytest.approx(0.12, rel=0.01)


def test_an_idle_limit_does_not_grow_and_bounds_hold() -> None:
    settings = AdaptiveConcurrency(min_limit=8, max_limit=12, smoothing=1.0)
    learned = AdaptiveLimit(settings, 10, now=0.0)
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    assert learned.update(1.0, seats_in_use=2, waiting=0) is None  # low latency, not busy
    assert learned.limit == 10
    _feed(learned, "api", 0.1, MIN_SAMPLES)
    assert learned.update(2.0, seats_in_use=10, waiting=3) == 12  # 10 × 1.2
    _feed(learned, "api", 1.0, MIN_SAMPLES)
    assert learned.update(3.0, seats_in_use=12, waiting=3) == 8  # halved, floored


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


def _stuck(learned: AdaptiveLimit, latency: float, in_flight: int) -> tuple[float, int | None]:
    """Updates a second apart, each of 20 samples at ``latency`` with ``in_flight`` held,
    until one starts a probe (at most :data:`PROBE_AFTER`): when, and what it applied."""
    now = 0.0
    moved = None
    for _ in range(PROBE_AFTER):
        now += 1.0
        _feed(learned, "api", latency, 20)
        moved = learned.update(now, seats_in_use=in_flight, waiting=0)
        if learned.probing:
            break
    return now, moved


def test_a_baseline_learned_with_every_client_at_once_is_probed_and_replaced() -> None:
    # A restart under full load: 200 clients from the start, a knee at 40, 50 ms at most 40
    # in flight (processor sharing: 0.25 s at 200). The baseline is learned at 200 and the
    # ratio reads 1 there: nothing would ever lower the concurrency. A probe halves the
    # limit in force while latency falls significantly, then restores it.
    def latency(in_flight: int) -> float:
        return 0.05 * max(1.0, in_flight / 40)

    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=400), 400, now=0.0)
    now, moved = _stuck(learned, latency(200), 200)
    assert learned.baselines["api"] == pytest.approx(0.25)  # learned congested
    assert (now, moved) == (PROBE_AFTER, 100)  # the PROBE_AFTER-th stuck update probes
    assert learned.probing and learned.probes == 1
    assert learned.applied == 100 and learned.limit > 400  # the learned limit is kept
    probed = []
    for step in (100, 50, 25, 12):
        assert learned.applied == step
        step_time = PROBE_CHECK * 1.0
        now += step_time
        assert learned.update(now, seats_in_use=step + 10, waiting=300) is None  # draining
        now += step_time
        assert learned.update(now, seats_in_use=step, waiting=300) is None  # drained
        _feed(learned, "api", 1.0, step)  # the requests running then: dropped
        _feed(learned, "api", latency(step), 10)
        now += step_time
        probed.append(learned.update(now, seats_in_use=step, waiting=300))
    assert probed == [50, 25, 12, round(learned.limit)]  # down while latency falls, then back
    assert not learned.probing
    assert learned.baselines["api"] == pytest.approx(0.05)
    limit = learned.limit
    _feed(learned, "api", latency(200), 20)
    learned.update(now + 1.0, seats_in_use=200, waiting=0)
    assert learned.last_ratio == pytest.approx(5.0)
    assert learned.limit < limit  # the limit comes down at last


def test_a_baseline_seen_below_the_concurrency_is_not_probed() -> None:
    # The same stuck concurrency, but the baseline was seen at a quarter of it: no probe.
    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=400), 400, now=0.0)
    _feed(learned, "api", 0.05, 20)
    learned.update(1.0, seats_in_use=50, waiting=0)
    now = 1.0
    for _ in range(3 * PROBE_AFTER):
        now += 1.0
        _feed(learned, "api", 0.05, 20)
        learned.update(now, seats_in_use=200, waiting=0)
    assert learned.probes == 0 and learned.last_ratio == pytest.approx(1.0)


def test_a_probe_confirming_its_baseline_ends_and_the_next_one_waits() -> None:
    # Latency does not fall below the concurrency that runs (the service time is flat): one
    # step confirms the baseline there, the limit is restored, and the baseline now rests on
    # evidence from below: no further probe.
    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=100), 100, now=0.0)
    now, moved = _stuck(learned, 0.05, 40)
    assert moved == 20 and learned.probing
    now += PROBE_CHECK
    assert learned.update(now, seats_in_use=20, waiting=0) is None
    _feed(learned, "api", 0.05, 30)
    now += PROBE_CHECK
    assert learned.update(now, seats_in_use=20, waiting=0) == 100
    assert not learned.probing and learned.baselines["api"] == pytest.approx(0.05)
    for _ in range(2 * PROBE_SPACING):
        now += 1.0
        _feed(learned, "api", 0.05, 20)
        learned.update(now, seats_in_use=40, waiting=0)
    assert learned.probes == 1


def test_a_probe_that_sees_nothing_gives_up_and_a_reload_ends_one() -> None:
    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=100), 100, now=0.0)
    now, moved = _stuck(learned, 0.05, 40)
    assert moved == 20 and learned.probing
    # Nothing drains, nothing is sampled: each phase gives up after updateInterval.
    assert learned.update(now + 1.0, seats_in_use=40, waiting=0) is None
    assert learned.update(now + 2.0, seats_in_use=40, waiting=0) == 100
    assert not learned.probing
    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=100), 100, now=0.0)
    assert _stuck(learned, 0.05, 40)[1] == 20
    learned.configure(AdaptiveConcurrency(initial_limit=100, max_limit=500))
    assert not learned.probing and learned.applied == 100


def test_no_probe_while_the_algorithm_is_lowering_the_limit() -> None:
    # The baseline is unseen below the concurrency, but the ratio reads congestion and the
    # limit falls update after update: the algorithm is already looking below.
    learned = AdaptiveLimit(AdaptiveConcurrency(initial_limit=400), 400, now=0.0)
    _feed(learned, "api", 0.05, 20)
    learned.update(1.0, seats_in_use=200, waiting=0)
    for second in range(2, 2 * PROBE_AFTER):
        _feed(learned, "api", 0.1, 20)
        learned.update(float(second), seats_in_use=min(200, learned.applied), waiting=100)
    assert learned.probes == 0
    assert learned.applied < 100
