"""The fairness targets of the performance issue, in fake time (exact, a few seconds in all).

The scenarios are those of ``benchmarks/fairness_bench.py`` (see docs/performance.md): the real
Limiter on a FakeClock against an asyncio.Semaphore of the same capacity, 8 seats, service
times uniform in 50-150 ms, 60 fake seconds with the first 5 not counted.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from functools import cache

import pytest

from benchmarks.fairness_sim import (
    ELEPHANT_VS_MICE,
    EQUAL_FLOWS,
    UNEQUAL_FLOWS,
    Record,
    Scenario,
    Summary,
    jain_index,
    simulate,
    summarize,
    utilization_while_backlogged,
)


@cache  # the scenarios are frozen: tests that share one share its (deterministic) run
def run(scenario: Scenario, gate: str) -> Summary:
    assert gate in ("apf", "fifo")
    return summarize(scenario, gate, simulate(scenario, gate))  # type: ignore[arg-type]


def test_jain_index_and_utilization_helpers() -> None:
    assert jain_index([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    records = [
        Record("a", arrival=0.0, start=0.0, end=2.0),
        Record("b", arrival=0.0, start=1.0, end=2.0),  # waits during [0, 1): one of 2 seats busy
        Record("c", arrival=3.0, start=3.0, end=4.0),  # no backlog
    ]
    utilization, backlogged = utilization_while_backlogged(records, 2, 0.0, 4.0)
    assert utilization == pytest.approx(0.5)
    assert backlogged == pytest.approx(0.25)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mice_p99_wait_behind_apf_is_at_most_a_tenth_of_fifo(seed: int) -> None:
    scenario = replace(ELEPHANT_VS_MICE, seed=seed)
    apf, fifo = run(scenario, "apf"), run(scenario, "fifo")
    assert apf.mice_served > 900 and fifo.mice_served > 900
    assert apf.rejected == 0
    # The FIFO mice queue behind the elephant's ~56 waiting requests (~0.7 s and more).
    assert fifo.mice_p99 > 0.7
    assert apf.mice_p99 / fifo.mice_p99 <= 0.10


@pytest.mark.parametrize("scenario", [ELEPHANT_VS_MICE, EQUAL_FLOWS, UNEQUAL_FLOWS])
def test_apf_keeps_every_seat_busy_while_requests_wait(scenario: Scenario) -> None:
    summary = run(scenario, "apf")
    assert summary.backlogged_fraction > 0.9  # the scenario really is an overload
    assert summary.utilization >= 0.95


def test_equal_backlogged_flows_jain_median_over_flow_hash_seeds() -> None:
    indices = [run(replace(EQUAL_FLOWS, seed=seed), "apf").jain_service for seed in range(1, 11)]
    assert statistics.median(indices) >= 0.99


@pytest.mark.xfail(
    strict=True,
    reason=(
        "shuffle sharding: APF is fair between queues, and ten flows with hands of 6 out of "
        "64 queues overlap; flow-hash seeds 6, 8 and 10 give Jain 0.9863, 0.9834, 0.9856 "
        "(seeds 1-10: median 0.9921, 7 of 10 >= 0.99)"
    ),
)
def test_equal_backlogged_flows_jain_for_every_flow_hash_seed() -> None:
    for seed in range(1, 11):
        assert run(replace(EQUAL_FLOWS, seed=seed), "apf").jain_service >= 0.99, seed


def test_with_hand_size_one_and_no_collision_fair_queuing_is_exact() -> None:
    # With hand size 1 each flow has one queue; when no two flows share one (as with seed 1),
    # APF's per-queue fairness is per-flow fairness.
    summary = run(replace(EQUAL_FLOWS, hand_size=1), "apf")
    assert summary.jain_service >= 0.999


def test_unequal_demand_fifo_serves_in_proportion_apf_nearly_equally() -> None:
    apf, fifo = run(UNEQUAL_FLOWS, "apf"), run(UNEQUAL_FLOWS, "fifo")
    service = list(fifo.service_by_flow.values())
    assert service == sorted(service)  # 4, 8, 16, 32, 64 in flight: FIFO follows demand
    assert fifo.jain_service < 0.6
    assert apf.jain_service > 0.95
