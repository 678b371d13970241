"""The soak's RSS check (benchmarks/long_run.py): measured from both windows, or failed."""

from __future__ import annotations

import math

from benchmarks.long_run import RSS_GROWTH_MAX, rss_growth

MIB = 2**20


def test_rss_growth_compares_the_peaks_of_the_first_and_last_tenth() -> None:
    samples = [(0, 0.0, 30 * MIB), (50, 0.25, 32 * MIB), (500, 1.0, 40 * MIB), (950, 2.0, 33 * MIB)]
    first, last, growth = rss_growth(samples, 1000)
    assert (first, last) == (32 * MIB, 33 * MIB)
    assert math.isclose(growth, 1 / 32)
    assert growth < RSS_GROWTH_MAX


def test_a_window_without_a_sample_fails_the_check_instead_of_passing() -> None:
    # A run too short for the 0.25 s sampler: nothing in the last tenth. Growth is unknown,
    # and the check (growth < limit) must come out False, not "-100%, ok".
    samples = [(0, 0.0, 30 * MIB), (400, 0.25, 31 * MIB)]
    first, last, growth = rss_growth(samples, 1000)
    assert first == 30 * MIB
    assert last is None
    assert math.isnan(growth)
    assert not growth < RSS_GROWTH_MAX
    assert math.isnan(rss_growth([(500, 0.25, 31 * MIB)], 1000)[2])  # nor the first tenth
