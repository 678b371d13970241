"""Fairness under overload: APF against a FIFO semaphore of the same capacity.

Run: ``.venv/bin/python -m benchmarks.fairness_bench`` (``--quick`` for a smoke test).

1. **Fake time** (exact, :mod:`benchmarks.fairness_sim`): the real ``Limiter`` on a
   ``FakeClock`` against an ``asyncio.Semaphore`` driven by the same clock, 8 seats, service
   uniform in 50–150 ms, 60 s per run, the first 5 s not counted, for flow-hash seeds 1…N:

   * one elephant (64 requests in flight) against 10 mice (Poisson, 2 requests/s each):
     the mice's p99 wait with APF over their p99 wait behind the semaphore (target ≤ 0.10),
     and the utilization of the seats while requests wait (target ≥ 0.95);
   * ten equal backlogged flows (16 in flight each): Jain's index of the seat-seconds each
     got (target ≥ 0.99); and, for comparison, five backlogged flows of unequal demand.

2. **Real HTTP** (:mod:`benchmarks.fairness_http`): the same two loads against uvicorn
   servers (``/work`` behind APF, or behind a FIFO semaphore of 8), rounds alternating the two:

   * elephant and mice: the mice's p99 wait (as the server measured it) and p99 latency, the
     mice's latency over time for the plot, and the utilization of the seats while requests
     wait (from the server's handler start and end times);
   * ten equal backlogged flows: Jain's index of the seat-seconds each got (the server's
     handler times), and the utilization.

The results go to ``benchmarks/results/fairness.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.bench_app import build_info
from benchmarks.fairness_http import HttpLoad, HttpRecord, run_http_load
from benchmarks.fairness_sim import (
    ELEPHANT_VS_MICE,
    EQUAL_FLOWS,
    UNEQUAL_FLOWS,
    Gate,
    Record,
    Scenario,
    Summary,
    jain_index,
    percentile,
    simulate,
    summarize,
    utilization_while_backlogged,
)
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT, running_server, uvicorn_impl

__all__ = ["fake_time", "http", "main", "server_side"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "fairness.json"
TARGETS = {"mice_p99_ratio_max": 0.10, "utilization_min": 0.95, "jain_min": 0.99}


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "n": len(values),
    }


def _run(scenario: Scenario, gate: Gate) -> Summary:
    return summarize(scenario, gate, simulate(scenario, gate))


def fake_time(seeds: list[int]) -> dict[str, Any]:
    """Every fake-time scenario for each seed; per-seed figures and their spread."""
    mice_rows: list[dict[str, Any]] = []
    fixed_rows: list[dict[str, Any]] = []
    equal_rows: list[dict[str, Any]] = []
    unequal_rows: list[dict[str, Any]] = []
    series: dict[str, list[tuple[float, float]]] = {}
    fixed = replace(ELEPHANT_VS_MICE, service_shape="fixed")
    for seed in seeds:
        for scenario, rows in ((ELEPHANT_VS_MICE, mice_rows), (fixed, fixed_rows)):
            seeded = replace(scenario, seed=seed)
            records = {gate: simulate(seeded, gate) for gate in ("apf", "fifo")}
            apf, fifo = (summarize(seeded, g, records[g]) for g in ("apf", "fifo"))
            rows.append(
                {
                    "seed": seed,
                    "apf_p50": apf.mice_p50,
                    "apf_p99": apf.mice_p99,
                    "fifo_p50": fifo.mice_p50,
                    "fifo_p99": fifo.mice_p99,
                    "ratio": apf.mice_p99 / fifo.mice_p99,
                    "apf_utilization": apf.utilization,
                    "fifo_utilization": fifo.utilization,
                    "apf_backlogged": apf.backlogged_fraction,
                    "mice_served": apf.mice_served,
                    "rejected": apf.rejected,
                }
            )
            if scenario is ELEPHANT_VS_MICE and seed == seeds[0]:
                for gate in ("apf", "fifo"):
                    series[gate] = [
                        (r.arrival, r.start - r.arrival)
                        for r in records[gate]
                        if r.is_mouse and r.start is not None
                    ]
        for scenario, rows in ((EQUAL_FLOWS, equal_rows), (UNEQUAL_FLOWS, unequal_rows)):
            seeded = replace(scenario, seed=seed)
            apf, fifo = _run(seeded, "apf"), _run(seeded, "fifo")
            rows.append(
                {
                    "seed": seed,
                    "apf_jain": apf.jain_service,
                    "fifo_jain": fifo.jain_service,
                    "apf_jain_completed": apf.jain_completed,
                    "apf_utilization": apf.utilization,
                    "apf_service_by_flow": apf.service_by_flow,
                    "fifo_service_by_flow": fifo.service_by_flow,
                }
            )

    def spread(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
        return _spread([row[key] for row in rows])

    return {
        "scenarios": {
            "elephant_vs_mice": asdict(ELEPHANT_VS_MICE),
            "equal_flows": asdict(EQUAL_FLOWS),
            "unequal_flows": asdict(UNEQUAL_FLOWS),
        },
        "seeds": seeds,
        "elephant_vs_mice": {
            "rows": mice_rows,
            "ratio": spread(mice_rows, "ratio"),
            "apf_p99": spread(mice_rows, "apf_p99"),
            "fifo_p99": spread(mice_rows, "fifo_p99"),
            "apf_utilization": spread(mice_rows, "apf_utilization"),
            "fifo_utilization": spread(mice_rows, "fifo_utilization"),
        },
        "elephant_vs_mice_fixed_service": {
            "rows": fixed_rows,
            "ratio": spread(fixed_rows, "ratio"),
            "apf_p99": spread(fixed_rows, "apf_p99"),
            "fifo_p99": spread(fixed_rows, "fifo_p99"),
        },
        "equal_flows": {
            "rows": equal_rows,
            "apf_jain": spread(equal_rows, "apf_jain"),
            "fifo_jain": spread(equal_rows, "fifo_jain"),
            "apf_utilization": spread(equal_rows, "apf_utilization"),
            "seeds_meeting_target": sum(r["apf_jain"] >= TARGETS["jain_min"] for r in equal_rows),
        },
        "unequal_flows": {
            "rows": unequal_rows,
            "apf_jain": spread(unequal_rows, "apf_jain"),
            "fifo_jain": spread(unequal_rows, "fifo_jain"),
        },
        "mice_wait_series": series,
    }


def _mice_figures(records: list[HttpRecord], warmup: float) -> dict[str, Any]:
    counted = [r for r in records if r.sent >= warmup]
    mice = [r for r in counted if r.flow != "elephant"]
    served = [r for r in mice if r.status == 200]
    elephant = [r for r in counted if r.flow == "elephant"]
    return {
        "mice_sent": len(mice),
        "mice_served": len(served),
        "mice_failed": len(mice) - len(served),
        "mice_wait_p50": percentile([r.wait for r in served], 0.50),
        "mice_wait_p99": percentile([r.wait for r in served], 0.99),
        "mice_latency_p50": percentile([r.latency for r in served], 0.50),
        "mice_latency_p99": percentile([r.latency for r in served], 0.99),
        "elephant_served": sum(1 for r in elephant if r.status == 200),
        "elephant_rejected": sum(1 for r in elephant if r.status == 429),
        "elephant_failed": sum(1 for r in elephant if r.status not in (200, 429)),
    }


# The client and the server read the same monotonic clock (Linux); a handler start outside
# its request's send-to-answer interval, beyond this slack, means they do not.
_CLOCK_SLACK = 0.005


def server_side(
    records: list[HttpRecord], capacity: int, begin: float, end: float
) -> dict[str, float]:
    """Figures from the server's handler times, over ``[begin, end)`` of the run.

    Returns:
        ``utilization`` of the seats while requests waited and the ``backlogged`` fraction of
        the window (:func:`~benchmarks.fairness_sim.utilization_while_backlogged`), and
        ``jain`` of the seat-seconds each backlogged flow (``flow-<n>``) was given inside the
        window (``nan`` without such flows). All ``nan`` if the server's times are missing or
        not on the client's clock.
    """
    nan = {"utilization": math.nan, "backlogged": math.nan, "jain": math.nan}
    served = [r for r in records if r.status == 200]
    if not served or any(
        not (r.sent - _CLOCK_SLACK <= r.start <= r.end <= r.sent + r.latency + _CLOCK_SLACK)
        for r in served  # false for nan too
    ):
        return nan
    timeline = [Record(r.flow, r.start - r.wait, r.start, r.end) for r in served]
    timeline += [Record(r.flow, r.sent, rejected=True) for r in records if r.status == 429]
    utilization, backlogged = utilization_while_backlogged(timeline, capacity, begin, end)
    given: dict[str, float] = {}
    for r in served:
        if r.flow.startswith("flow-"):
            inside = min(r.end, end) - max(r.start, begin)
            given[r.flow] = given.get(r.flow, 0.0) + max(inside, 0.0)
    jain = jain_index(list(given.values())) if given else math.nan
    return {"utilization": utilization, "backlogged": backlogged, "jain": jain}


def http(rounds: int, load: HttpLoad, warmup: float, capacity: int) -> dict[str, Any]:
    """Both HTTP loads, ``rounds`` rounds alternating APF and the semaphore.

    ``load`` is the elephant-and-mice load; the equal-flows load has the same duration,
    service times and seed, with ten backlogged flows of 16 requests in flight instead.
    """
    env = {"APF_BENCH_CAPACITY": str(capacity)}
    loop, protocol = uvicorn_impl()
    per_round: list[dict[str, Any]] = []
    series: dict[str, list[tuple[float, float]]] = {}
    server_build: dict[str, Any] = {}
    equal_load = replace(load, elephant_concurrency=0, mice=0, backlogged=(16,) * 10)
    for index in range(rounds):
        order = ("semaphore", "apf") if index % 2 == 0 else ("apf", "semaphore")
        figures: dict[str, Any] = {}
        for variant in order:
            with running_server(variant, f"work_{variant}", env=env) as server:
                server_build = server.info
                seeded = replace(load, seed=load.seed + index)
                records = asyncio.run(run_http_load(server.host, server.port, seeded))
                equal = replace(equal_load, seed=load.seed + index)
                equal_records = asyncio.run(run_http_load(server.host, server.port, equal))
            figures[variant] = _mice_figures(records, warmup)
            mice_side = server_side(records, capacity, warmup, load.duration)
            figures[variant]["utilization"] = mice_side["utilization"]
            figures[variant]["backlogged"] = mice_side["backlogged"]
            equal_side = server_side(equal_records, capacity, warmup, load.duration)
            figures[variant]["equal_flows"] = {
                **equal_side,
                "served": sum(1 for r in equal_records if r.status == 200),
                "failed": sum(1 for r in equal_records if r.status != 200),
            }
            if index == 0:
                series[variant] = [
                    (r.sent, r.latency) for r in records if r.flow != "elephant" and r.status == 200
                ]
        figures["wait_ratio"] = (
            figures["apf"]["mice_wait_p99"] / figures["semaphore"]["mice_wait_p99"]
        )
        figures["latency_ratio"] = (
            figures["apf"]["mice_latency_p99"] / figures["semaphore"]["mice_latency_p99"]
        )
        per_round.append(figures)
        print(
            f"  HTTP round {index + 1}/{rounds}: mice p99 wait "
            f"{figures['semaphore']['mice_wait_p99'] * 1000:.0f} ms (semaphore) -> "
            f"{figures['apf']['mice_wait_p99'] * 1000:.0f} ms (APF), ratio "
            f"{figures['wait_ratio']:.3f}; p99 latency ratio {figures['latency_ratio']:.3f}; "
            f"utilization APF {figures['apf']['utilization']:.4f}; equal flows Jain APF "
            f"{figures['apf']['equal_flows']['jain']:.4f} (semaphore "
            f"{figures['semaphore']['equal_flows']['jain']:.4f}), utilization "
            f"{figures['apf']['equal_flows']['utilization']:.4f}"
        )
    return {
        "load": asdict(load),
        "equal_flows_load": asdict(equal_load),
        "warmup": warmup,
        "capacity": capacity,
        "uvicorn_loop": loop,
        "uvicorn_http": protocol,
        "server_build": server_build,
        "rounds": per_round,
        "wait_ratio": _spread([r["wait_ratio"] for r in per_round]),
        "latency_ratio": _spread([r["latency_ratio"] for r in per_round]),
        "apf_utilization": _spread(
            [r["apf"]["equal_flows"]["utilization"] for r in per_round]
            + [r["apf"]["utilization"] for r in per_round]
        ),
        "apf_equal_flows_jain": _spread([r["apf"]["equal_flows"]["jain"] for r in per_round]),
        "semaphore_equal_flows_jain": _spread(
            [r["semaphore"]["equal_flows"]["jain"] for r in per_round]
        ),
        "mice_latency_series": series,
    }


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms"


def report(result: dict[str, Any]) -> str:
    """A readable summary with the targets."""
    fake = result["fake_time"]
    mice, equal = fake["elephant_vs_mice"], fake["equal_flows"]
    fixed, unequal = fake["elephant_vs_mice_fixed_service"], fake["unequal_flows"]
    seeds = len(fake["seeds"])
    lines = [
        f"1. Fake time, {seeds} flow-hash seeds (min / median / max)",
        "   elephant (64 in flight) vs 10 mice, 8 seats, service 50–150 ms:",
        f"     mice p99 wait  APF {_ms(mice['apf_p99']['min'])} / {_ms(mice['apf_p99']['median'])}"
        f" / {_ms(mice['apf_p99']['max'])}   FIFO {_ms(mice['fifo_p99']['median'])} (median)",
        f"     ratio APF/FIFO {mice['ratio']['min']:.3f} / {mice['ratio']['median']:.3f} / "
        f"{mice['ratio']['max']:.3f}   (target <= {TARGETS['mice_p99_ratio_max']})",
        f"     utilization while backlogged: APF {mice['apf_utilization']['min']:.4f} (min), "
        f"FIFO {mice['fifo_utilization']['min']:.4f}   (target >= {TARGETS['utilization_min']})",
        f"   same, fixed 100 ms service: ratio {fixed['ratio']['min']:.3f} / "
        f"{fixed['ratio']['median']:.3f} / {fixed['ratio']['max']:.3f}",
        f"   10 equal backlogged flows: Jain APF {equal['apf_jain']['min']:.4f} / "
        f"{equal['apf_jain']['median']:.4f} / {equal['apf_jain']['max']:.4f}; FIFO "
        f"{equal['fifo_jain']['median']:.4f}   (target >= {TARGETS['jain_min']}: "
        f"{equal['seeds_meeting_target']}/{seeds} seeds)",
        f"   5 backlogged flows of unequal demand (4–64 in flight): Jain APF "
        f"{unequal['apf_jain']['min']:.4f} / {unequal['apf_jain']['median']:.4f} / "
        f"{unequal['apf_jain']['max']:.4f}; FIFO {unequal['fifo_jain']['median']:.4f}",
    ]
    if "http" in result:
        h = result["http"]
        rounds = h["rounds"]
        lines.append(f"2. Real HTTP, {len(rounds)} rounds of {h['load']['duration']:g} s each")
        for index, r in enumerate(rounds, 1):
            lines.append(
                f"   round {index}: mice p99 wait semaphore {_ms(r['semaphore']['mice_wait_p99'])}"
                f", APF {_ms(r['apf']['mice_wait_p99'])} (ratio {r['wait_ratio']:.3f}); p99 "
                f"latency {_ms(r['semaphore']['mice_latency_p99'])} -> "
                f"{_ms(r['apf']['mice_latency_p99'])}; elephant served "
                f"{r['semaphore']['elephant_served']} / {r['apf']['elephant_served']}"
            )
        lines.append(
            f"   mice p99 wait ratio: median {h['wait_ratio']['median']:.3f} "
            f"[{h['wait_ratio']['min']:.3f}–{h['wait_ratio']['max']:.3f}] "
            f"(target <= {TARGETS['mice_p99_ratio_max']})"
        )
        for index, r in enumerate(rounds, 1):
            lines.append(
                f"   round {index}, 10 equal backlogged flows: Jain APF "
                f"{r['apf']['equal_flows']['jain']:.4f}, semaphore "
                f"{r['semaphore']['equal_flows']['jain']:.4f}; utilization while backlogged "
                f"APF {r['apf']['equal_flows']['utilization']:.4f} (elephant and mice "
                f"{r['apf']['utilization']:.4f})"
            )
        lines.append(
            f"   Jain APF: median {h['apf_equal_flows_jain']['median']:.4f} "
            f"(target >= {TARGETS['jain_min']}); utilization APF: min "
            f"{h['apf_utilization']['min']:.4f} (target >= {TARGETS['utilization_min']})"
        )
    return "\n".join(lines)


def main() -> None:
    """Parse options, run both parts, print the report and write the JSON file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=20, help="flow-hash seeds (fake time)")
    parser.add_argument("--http-rounds", type=int, default=4, help="HTTP rounds (0: none)")
    parser.add_argument("--http-duration", type=float, default=20.0, help="seconds per HTTP run")
    parser.add_argument("--http-warmup", type=float, default=3.0, help="seconds not counted")
    parser.add_argument("--capacity", type=int, default=8, help="seats (HTTP)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument("--quick", action="store_true", help="smoke test: 3 seeds, 1 x 6 s")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.http_rounds, args.http_duration, args.http_warmup = 3, 1, 6.0, 1.0
    started = time.perf_counter()
    result: dict[str, Any] = {
        "build": build_info(),
        "targets": TARGETS,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print(f"apf_limiter build: {result['build']['build']} ({result['build']['queueset_file']})")
    result["fake_time"] = fake_time(list(range(1, args.seeds + 1)))
    if args.http_rounds > 0:
        load = HttpLoad(duration=args.http_duration)
        result["http"] = http(args.http_rounds, load, args.http_warmup, args.capacity)
    print(report(result))
    print(f"({time.perf_counter() - started:.0f} s)")
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
