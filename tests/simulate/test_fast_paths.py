"""The simulation's shortcuts give what the plain way gives.

Open-loop arrivals are drawn ahead in chunks, and the report sorts each tally's waits once and
merges them per level, schema and flow: the traffic and the percentiles must be those of one
draw per arrival and of one sort of every wait.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from apf_limiter._simulate._report import _percentile, build_report
from apf_limiter._simulate._run import Simulation
from apf_limiter._simulate._scenario import Flow, parse_scenario
from apf_limiter._simulate._sources import _CHUNK, OpenSource, scenario_sources
from apf_limiter.config import load_config
from tests.simulate.test_commands import SMALL


def _one_at_a_time(flow: Flow, rng: random.Random) -> list[tuple[int, str, float]]:
    """Each arrival's time, user and service time, drawn one arrival at a time."""
    service = flow.service
    assert service.kind == "exponential"
    at = flow.start
    if flow.arrivals == "poisson":
        at += rng.expovariate(flow.rate)
    arrivals = []
    while at < flow.stop:
        when = round(at * 1e9)
        user = rng.randrange(flow.users) if flow.users > 1 else 0
        arrivals.append((when, flow.user.replace("{i}", str(user)), rng.expovariate(1 / service.a)))
        at += rng.expovariate(flow.rate) if flow.arrivals == "poisson" else 1 / flow.rate
    return arrivals


@pytest.mark.parametrize(
    ("arrivals", "users", "rate", "duration"),
    [
        ("poisson", 7, 100.0, 3 * _CHUNK / 100 + 0.37),  # across several chunks
        ("constant", 1, 100.0, 2 * _CHUNK / 100),  # the stop falls at a chunk's end
        ("poisson", 3, 5.0, 4.0),  # fewer arrivals than a chunk
    ],
)
def test_open_loop_arrivals_drawn_ahead_are_those_drawn_one_at_a_time(
    arrivals: str, users: int, rate: float, duration: float
) -> None:
    scenario = parse_scenario(
        {
            "duration": duration,
            "seed": 9,
            "flows": [
                {
                    "name": "f",
                    "user": "u{i}",
                    "users": users,
                    "rate": rate,
                    "arrivals": arrivals,
                    "start": 0.25,
                    "service": {"distribution": "exponential", "mean": 0.2},
                }
            ],
        }
    )
    (flow,) = scenario.flows
    (source,) = scenario_sources(scenario)
    assert isinstance(source, OpenSource)
    drawn = []
    while source.next_ns >= 0:
        when = source.next_ns
        job = source.take(when)
        drawn.append((when, job.digest.user, job.service))
    expected = _one_at_a_time(flow, random.Random(f"{scenario.seed}/{flow.name}/open"))
    assert drawn == expected
    assert len(drawn) > 10


def _waits_report() -> tuple[dict[str, Any], list[float]]:
    # Two traffic flows at one level and schema: the level's percentiles merge two tallies.
    scenario = parse_scenario(
        {
            "duration": 20,
            "seed": 2,
            "flows": [
                {"name": "a", "user": "a{i}", "users": 5, "rate": 30, "service": 0.4},
                {
                    "name": "b",
                    "user": "b",
                    "rate": 12,
                    "service": {"distribution": "exponential", "mean": 0.5},
                },
            ],
        }
    )
    result = Simulation(load_config(SMALL)).run(scenario_sources(scenario))
    every = sorted(w for tally in result.tallies.values() for w in tally.waits)
    return build_report(result, config="c", traffic="t"), every


def test_merged_percentiles_are_those_of_every_wait_sorted() -> None:
    report, every = _waits_report()
    level = report["priority_levels"]["web"]
    assert len(report["flows"]) == 2 and level["served"] == len(every)
    assert sum(w > 0 for w in every) > 100  # the server is busy: waits to rank
    assert level["wait_p50"] == _percentile(every, 0.5)
    assert level["wait_p99"] == _percentile(every, 0.99)
    assert level["wait_max"] == every[-1]
    assert not math.isclose(level["wait_p50"], level["wait_p99"])
