"""The adaptive server limit against the criteria of its issue, in fake time, side by side.

Every run is a :mod:`benchmarks.adaptive_sim` simulation (a processor-sharing backend with a
knee at ``C`` seats, ±10% noise, Poisson arrivals at 1.2 × its throughput to two levels with
different service times), deterministic for a seed:

* (a) knee — from 10 × C and from C / 5, the time after which ServerCL stays in
  [0.8 C, 1.5 C] (target: ≤ 60 s);
* (b) hindsight — goodput and p99 against the best static limit of a sweep, same traffic
  (targets: ≥ 0.95 × and ≤ 1.25 ×);
* (c) change — C halves at 120 s and recovers at 200 s: the time to be back in range
  (targets: 30 s and 60 s);
* (d) steady — the coefficient of variation of ServerCL over 5 minutes (target: ≤ 10%);
* (e) fairness — mice beside an elephant (3 C in flight), mice p99 queue wait against a FIFO
  semaphore of C slots (target: ≤ 0.10 ×);
* (g) restart — closed-loop clients (200 or 1,000, 50 ms ±10%) all arriving at once at a
  limit of 10 × C (C = 40): the first baseline is learned congested. When ServerCL settles
  in [0.8 C, 1.5 C] (target: ≤ 60 s, and stays), and after C halves at 120 s in
  [0.4 C, 0.75 C] (target: ≤ 30 s); what probes cost (target: ≤ 5% of throughput) and
  the requests rejected while one ran (target: none).

``python -m benchmarks.adaptive_bench`` prints the tables and writes
``benchmarks/results/adaptive.json``; ``--quick`` runs (a) and (g) only, smaller.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

from benchmarks.adaptive_sim import MIXED, Result, Run, cv, percentile, simulate
from benchmarks.result_file import write_result

__all__ = [
    "ALGORITHMS",
    "change",
    "change_steps",
    "fairness",
    "hindsight",
    "knee",
    "main",
    "restart",
    "settle_time",
    "steady",
]

ALGORITHMS: tuple[str, ...] = ("Gradient", "AIMD")
LOAD = 1.2
STATIC_FACTORS: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0)
_DEFAULT_OUT = Path(__file__).parent / "results" / "adaptive.json"


def _adaptive(algorithm: str) -> dict[str, Any]:
    return {"algorithm": algorithm, "minLimit": 1, "maxLimit": 1000}


def settle_time(result: Result, capacity: float, start: float, end: float) -> float | None:
    """Seconds after ``start`` from which ServerCL stays in [0.8 C, 1.5 C] until ``end``.

    Samples taken during a probe (the limit held low a moment to see the baseline) are left
    out: the limit a probe restores is the one judged.
    """
    settled: float | None = None
    for t, limit in result.limits:
        if not start <= t < end or t in result.probing:
            continue  # a probe's moment at a low limit neither settles nor unsettles
        if 0.8 * capacity <= limit <= 1.5 * capacity:
            if settled is None:
                settled = t - start
        else:
            settled = None
    return settled


def knee(
    algorithm: str, capacity: int, start_factor: float, duration: float = 120.0
) -> dict[str, Any]:
    """(a): from ``start_factor`` × C, when does ServerCL settle in range?"""
    start = max(1, round(start_factor * capacity))
    result = simulate(Run(((0.0, capacity),), LOAD, duration, start, _adaptive(algorithm)))
    settled = settle_time(result, capacity, 0.0, duration)
    return {
        "algorithm": algorithm,
        "start": start,
        "settled_after": settled,
        "final_limit": result.limits[-1][1],
        "probes": result.probes,
        "passes": settled is not None and settled <= 60.0,
    }


def _figures(result: Result, start: float, end: float) -> dict[str, float]:
    return {
        "throughput": round(result.throughput(start, end), 2),
        "p99": round(result.p99(start, end), 4),
        "p99_execution": round(result.p99(start, end, execution=True), 4),
        "rejected": result.rejected,
    }


def hindsight(capacity: int, duration: float = 180.0, warmup: float = 60.0) -> dict[str, Any]:
    """(b): each algorithm (starting at 2 C) against a sweep of static limits."""
    statics = {}
    for factor in STATIC_FACTORS:
        limit = max(1, round(factor * capacity))
        statics[limit] = _figures(
            simulate(Run(((0.0, capacity),), LOAD, duration, limit)), warmup, duration
        )
    top = max(figures["throughput"] for figures in statics.values())
    best_limit = min(
        (limit for limit, figures in statics.items() if figures["throughput"] >= 0.99 * top),
        key=lambda limit: statics[limit]["p99"],
    )
    best = statics[best_limit]
    adaptive = {}
    for algorithm in ALGORITHMS:
        result = simulate(
            Run(((0.0, capacity),), LOAD, duration, 2 * capacity, _adaptive(algorithm))
        )
        figures = _figures(result, warmup, duration)
        figures["throughput_ratio"] = round(figures["throughput"] / best["throughput"], 4)
        figures["p99_ratio"] = round(figures["p99"] / best["p99"], 4)
        figures["passes"] = figures["throughput_ratio"] >= 0.95 and figures["p99_ratio"] <= 1.25
        adaptive[algorithm] = figures
    return {"static": statics, "best_static": best_limit, "adaptive": adaptive}


def change_steps(capacity: int) -> tuple[tuple[float, float], ...]:
    """The backend's capacity over time in (c): C, halved at 120 s, back at 200 s."""
    return ((0.0, capacity), (120.0, capacity / 2), (200.0, capacity))


def change(algorithm: str, capacity: int) -> dict[str, Any]:
    """(c): C halves at 120 s and comes back at 200 s."""
    half = capacity / 2
    result = simulate(Run(change_steps(capacity), LOAD, 320.0, capacity, _adaptive(algorithm)))
    down = settle_time(result, half, 120.0, 200.0)
    up = settle_time(result, capacity, 200.0, 320.0)
    return {
        "algorithm": algorithm,
        "halved_back_after": down,
        "recovered_after": up,
        "probes": result.probes,
        "passes": down is not None and down <= 30.0 and up is not None and up <= 60.0,
    }


def steady(algorithm: str, capacity: int) -> dict[str, Any]:
    """(d): the coefficient of variation of ServerCL over five minutes at constant load."""
    result = simulate(Run(((0.0, capacity),), LOAD, 360.0, capacity, _adaptive(algorithm)))
    limits = result.limits_between(60.0, 360.0)
    variation = cv(limits)
    return {
        "algorithm": algorithm,
        "cv": round(variation, 4),
        "mean_limit": round(sum(limits) / len(limits), 2),
        # Each move of ServerCL re-plans the levels and runs a borrowing adjustment.
        "moves": sum(1 for a, b in itertools.pairwise(limits) if a != b),
        "probes": result.probes,
        "passes": variation <= 0.10,
    }


def fairness(capacity: int, duration: float = 120.0) -> dict[str, Any]:
    """(e): mice's p99 queue wait beside an elephant, against a FIFO semaphore of C slots."""

    def mice_p99(result: Result) -> float:
        waits = [c[2] - c[3] for c in result.window(30.0, duration) if c[1] == "mouse"]
        return percentile(waits, 0.99)

    fifo = mice_p99(
        simulate(
            Run(((0.0, capacity),), 0.1, duration, capacity, elephant=3 * capacity, fifo=capacity)
        )
    )
    figures: dict[str, Any] = {"fifo_mice_p99_wait": round(fifo, 4)}
    for algorithm in ALGORITHMS:
        run = Run(
            ((0.0, capacity),), 0.1, duration, capacity, _adaptive(algorithm), elephant=3 * capacity
        )
        wait = mice_p99(simulate(run))
        figures[algorithm] = {
            "mice_p99_wait": round(wait, 4),
            "ratio_to_fifo": round(wait / fifo, 4),
            "passes": wait <= 0.10 * fifo,
        }
    return figures


def restart(
    algorithm: str,
    capacity: int = 40,
    clients: int = 200,
    start_factor: float = 10.0,
    halve_at: float = 120.0,
    duration: float = 180.0,
) -> dict[str, Any]:
    """(g): every closed-loop client at once from ``start_factor`` × C; C halves later."""
    steps = ((0.0, float(capacity)), (halve_at, capacity / 2))
    start = round(start_factor * capacity)
    run = Run(steps, 0.0, duration, start, _adaptive(algorithm), clients=clients)
    result = simulate(run)
    settled = settle_time(result, capacity, 0.0, halve_at)
    halved = settle_time(result, capacity / 2, halve_at, duration)
    work = MIXED[0][1]

    def rate(at: float) -> float:
        return (capacity if at < halve_at else capacity / 2) / work

    cost = result.probe_cost(rate)
    probe_rejected = result.probe_rejections()
    before = result.limits_between(halve_at - 30.0, halve_at)
    after = result.limits_between(duration - 30.0, duration)
    return {
        "algorithm": algorithm,
        "capacity": capacity,
        "clients": clients,
        "start": start,
        "settled_after": settled,
        "limit_before_halving": [min(before), max(before)],
        "halved_settled_after": halved,
        "limit_after_halving": [min(after), max(after)],
        "throughput": round(result.throughput(10.0, halve_at) / rate(0.0), 4),
        "throughput_halved": round(
            result.throughput(halve_at + 10.0, duration) / rate(halve_at), 4
        ),
        "probes": result.probes,
        "probe_seconds": round(sum(end - begin for begin, end in result.probe_windows), 2),
        "probe_cost": round(cost, 4),
        "rejected": result.rejected,
        "probe_rejected": probe_rejected,
        "passes": settled is not None
        and settled <= 60.0
        and halved is not None
        and halved <= 30.0
        and cost <= 0.05
        and probe_rejected == 0,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the criteria, print them, write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=20, help="the backend's knee C")
    parser.add_argument("--quick", action="store_true", help="(a) only, C = 10")
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT)
    args = parser.parse_args(argv)
    capacity = 10 if args.quick else args.capacity
    began = time.perf_counter()
    result: dict[str, Any] = {"capacity": capacity, "load": LOAD}
    result["knee"] = [
        knee(algorithm, capacity, factor) for algorithm in ALGORITHMS for factor in (10.0, 0.2)
    ]
    for row in result["knee"]:
        print(f"(a) {row}")
    if not args.quick:
        result["hindsight"] = hindsight(capacity)
        print(f"(b) {result['hindsight']}")
        result["change"] = [change(algorithm, capacity) for algorithm in ALGORITHMS]
        for row in result["change"]:
            print(f"(c) {row}")
        result["steady"] = [steady(algorithm, capacity) for algorithm in ALGORITHMS]
        for row in result["steady"]:
            print(f"(d) {row}")
        result["fairness"] = fairness(capacity)
        print(f"(e) {result['fairness']}")
    restart_capacity = 10 if args.quick else 40
    result["restart"] = [
        restart(algorithm, restart_capacity, clients)
        for clients in (5 * restart_capacity, 25 * restart_capacity)
        for algorithm in ALGORITHMS
    ]
    for row in result["restart"]:
        print(f"(g) {row}")
    result["seconds"] = round(time.perf_counter() - began, 1)
    write_result(result, args.out, default=_DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
