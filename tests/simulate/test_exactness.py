"""``simulate`` gives each request the wait, rejection and Retry-After a live limiter gives it.

With service times that do not depend on load, the same arrivals sent to a live
:class:`~apf_limiter.Limiter` in shadow mode (in fake time, the shell with its timers, each
request's would-be outcome read from ``Admission.shadow``) and run through the simulation must
end request for request the same: several levels, borrowing, Reject and Queue levels, seats > 1,
final seats with additional latency, the wait limit. The trace generator and the live harness are
those of ``tests/limiter/test_shadow_equivalence.py`` (distinct irrational offsets keep any two
events out of the same nanosecond, so no order of simultaneous events is compared).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from typing import Any

from apf_limiter import RequestDigest
from apf_limiter._simulate._run import Outcome, Simulation
from apf_limiter._simulate._scenario import Scenario, parse_scenario
from apf_limiter._simulate._sources import ListSource, Source, scenario_sources
from apf_limiter.config import load_config
from tests.limiter.test_shadow_equivalence import Arrival, _config, _digest, _run, random_traces
from tests.limiter.test_shadow_equivalence import _trace as make_trace

Live = tuple[str, float | str, int | None]


def _simulated(
    config: dict[str, Any], arrivals: list[tuple[float, str, RequestDigest, float]]
) -> list[Outcome]:
    simulation = Simulation(load_config(config), hash_seed=42, record=len(arrivals))
    result = simulation.run([ListSource(arrivals)])
    assert result.outcomes is not None
    # Recording takes the loop off its inlined arrival fast path: both must agree.
    fast = Simulation(load_config(config), hash_seed=42).run([ListSource(arrivals)])
    assert {
        k: (t.served, list(t.waits), t.rejected, t.retry_after) for k, t in fast.tallies.items()
    } == {
        k: (t.served, list(t.waits), t.rejected, t.retry_after) for k, t in result.tallies.items()
    }
    statistics = result.statistics
    for level in statistics.priority_levels.values():
        assert level.waiting_requests == 0 and level.executing_requests == 0
    return result.outcomes


def _same(live: list[Live], simulated: list[Outcome]) -> None:
    assert len(live) == len(simulated)
    for index, (a, b) in enumerate(zip(live, simulated, strict=True)):
        if a[0] == "ran":
            assert b.reason is None and b.wait is not None, (index, a, b)
            assert isinstance(a[1], float)
            # To a few nanoseconds: a shadow twin's run time is float seconds (the real
            # request's end minus its arrival), rounded to whole nanoseconds again when its
            # timer is set; the simulation adds integer nanoseconds.
            assert math.isclose(a[1], b.wait, abs_tol=3e-9), (index, a, b)
        else:
            assert (b.reason, b.retry_after) == (a[1], a[2]), (index, a, b)


def _live(config: dict[str, Any], trace: list[Arrival]) -> list[Live]:
    return asyncio.run(_run(config, trace, shadow=True))


def _arrivals(trace: list[Arrival]) -> list[tuple[float, str, RequestDigest, float]]:
    return [(arrival.at, "trace", _digest(arrival), arrival.service) for arrival in trace]


@random_traces(150)
def test_simulate_gives_each_request_what_a_live_shadow_limiter_gives_it(
    server_limit: int,
    wait_limit: float,
    shapes: list[tuple[int, int, bool, int]],
    raw: list[tuple[int, int, int, int, int, int, int]],
) -> None:
    config = _config(server_limit, wait_limit, shapes)
    trace = make_trace(raw, len(shapes))
    _same(_live(config, trace), _simulated(config, _arrivals(trace)))


def test_a_crowded_trace_is_the_same_simulated() -> None:
    # The fixed busy trace of the shadow-equivalence test: queues fill, waits time out,
    # borrowing moves seats; checks that the comparison covers every outcome.
    shapes = [(10, 50, False, 2), (10, 90, False, 1), (5, 0, True, 1)]
    raw = [
        (17 * i % 90, i % 3, i % 6, 1 + i % 3, i * 7 % 4, (0, 150, 900)[i % 3], 300 + 97 * i % 900)
        for i in range(40)
    ]
    config = _config(4, 1.5, shapes)
    trace = make_trace(raw, 3)
    live = _live(config, trace)
    _same(live, _simulated(config, _arrivals(trace)))
    kinds = {outcome[0] if outcome[0] == "ran" else outcome[1] for outcome in live}
    assert {"ran", "queue-full", "concurrency-limit", "time-out"} <= kinds
    assert any(o[0] == "ran" and isinstance(o[1], float) and o[1] > 0 for o in live)


def _expand(sources: list[Source]) -> list[tuple[float, str, RequestDigest, float]]:
    """Every arrival of open-loop sources, in the order the simulation starts them."""
    heap: list[tuple[int, int, int]] = []
    for index, source in enumerate(sources):
        if source.first() >= 0:
            heap.append((source.first(), index, index))
    heapq.heapify(heap)
    arrivals = []
    sequence = len(sources)
    while heap:
        at, _, index = heapq.heappop(heap)
        job = sources[index].take(at)
        arrivals.append((at / 1e9, job.flow, job.digest, job.service))
        if sources[index].next_ns >= 0:
            sequence += 1
            heapq.heappush(heap, (sources[index].next_ns, sequence, index))
    return arrivals


_SCENARIO_CONFIG = _config(6, 1.5, [(10, 50, False, 4), (10, 0, False, 2), (5, 0, True, 1)])


def _flooding_scenario() -> Scenario:
    """A flooding tenant and mice, Poisson arrivals, a burst, seats > 1: hundreds of requests."""
    return parse_scenario(
        {
            "duration": 20,
            "seed": 3,
            "flows": [
                {
                    "name": "flood",
                    "user": "u1",
                    "groups": [],
                    "path": "/alpha",
                    "rate": 12,
                    "service": {"distribution": "exponential", "mean": 0.6},
                },
                {
                    "name": "mice",
                    "user": "u4",
                    "groups": [],
                    "path": "/alpha",
                    "rate": 3,
                    "service": {"distribution": "uniform", "min": 0.01, "max": 0.1},
                },
                {
                    "name": "batch",
                    "user": "u2",
                    "groups": [],
                    "path": "/beta",
                    "rate": 2,
                    "seats": 2,
                    "service": {"distribution": "lognormal", "median": 0.8, "sigma": 0.4},
                    "bursts": [{"at": 5.5, "requests": 10, "over": 0.37}],
                },
                {
                    "name": "rejecting",
                    "user": "u3",
                    "groups": [],
                    "path": "/gamma",
                    "rate": 4,
                    "service": 0.9,
                },
            ],
        }
    )


def _trace_of() -> tuple[dict[str, Any], list[tuple[float, str, RequestDigest, float]]]:
    """The configuration of the flooding scenario, and the scenario's arrivals in order."""
    return _SCENARIO_CONFIG, _expand(scenario_sources(_flooding_scenario()))


def test_a_scenario_runs_as_its_arrivals_sent_to_a_live_shadow_limiter() -> None:
    # A scenario with load-independent service times, through the live limiter in shadow
    # mode and simulated.
    scenario = _flooding_scenario()
    config, arrivals = _trace_of()
    assert len(arrivals) > 300
    users = ("u1", "u2", "u3", "u4", "u5", "u6")
    levels = ("alpha", "beta", "gamma")
    trace = [
        Arrival(
            at,
            levels.index(digest.path[1:]),
            users.index(digest.user),
            digest.seats or 1,
            0,
            0.0,
            service,
        )
        for at, _, digest, service in arrivals
    ]
    # The live harness builds digests from the trace: the same users, paths and seats.
    assert [_digest(a) for a in trace] == [digest for _, _, digest, _ in arrivals]
    live = _live(config, trace)
    simulated = _simulated(config, arrivals)
    _same(live, simulated)
    assert {"ran", "queue-full", "concurrency-limit", "time-out"} <= {
        o[0] if o[0] == "ran" else o[1] for o in live
    }
    # And the scenario simulated from its own sources ends the same, flow for flow.
    direct = Simulation(load_config(config), hash_seed=42).run(scenario_sources(scenario))
    listed = Simulation(load_config(config), hash_seed=42).run([ListSource(arrivals)])
    for key, tally in listed.tallies.items():
        other = direct.tallies[key]
        assert (other.served, other.rejected, list(other.waits)) == (
            tally.served,
            tally.rejected,
            list(tally.waits),
        )
    assert set(direct.tallies) == set(listed.tallies)
