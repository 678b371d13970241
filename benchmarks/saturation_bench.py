"""Engine cost under saturation against queues, flows and backlog; memory per queued request.

Run: ``.venv/bin/python -m benchmarks.saturation_bench`` (``--quick`` for a smoke test).

Extends section 2 and 3 of :mod:`benchmarks.engine_bench` (it reuses its
:func:`~benchmarks.engine_bench.saturated_level` and
:func:`~benchmarks.engine_bench.memory_per_queued_request`) to a grid:

* the cost of one arrival that must queue plus one completion that dispatches the next
  request, with 2,000 requests queued, for 64…4,096 queues and 10…10,000 flows;
* the same cost with 1,000…100,000 requests queued (10,000 flows);
* bytes per queued request at 10,000 and 100,000 queued requests, and the marginal bytes
  of one more queued request between the two.

Every point of the grid is measured in the same interleaved rounds (one warm-up pass, then
five rounds over all points, each round in a rotated order; the median per point), so any
two points compare. Each cost is also given as a ratio to the first point of its row (64
queues, or the smallest backlog), and the dearest point against the cheapest. The results go
to ``benchmarks/results/saturation.json`` for :mod:`benchmarks.plots`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_app import build_info
from benchmarks.engine_bench import memory_per_queued_request, saturated_level
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = ["QUEUES", "FLOWS", "BACKLOGS", "sweep", "main"]

QUEUES = (64, 256, 1024, 4096)
FLOWS = (10, 100, 1000, 10_000)
BACKLOGS = (1000, 10_000, 100_000)
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "saturation.json"


def _interleaved_medians(steps: list[Callable[[int], float]], n: int, repeats: int) -> list[float]:
    """Median seconds per request of every step function, all of them interleaved.

    One warm-up pass first (the first timings after building the levels run cold), then
    ``repeats`` rounds over the whole list, each round starting one step further on, so that
    no point is always measured first or right after the same neighbour.
    """
    for step in steps:
        step(max(1, n // 4))
    samples: list[list[float]] = [[] for _ in steps]
    for round_ in range(repeats):
        for offset in range(len(steps)):
            index = (round_ + offset) % len(steps)
            samples[index].append(steps[index](n))
    return [statistics.median(s) for s in samples]


def sweep(
    n: int = 20_000,
    repeats: int = 5,
    queues: tuple[int, ...] = QUEUES,
    flows: tuple[int, ...] = FLOWS,
    backlogs: tuple[int, ...] = BACKLOGS,
    memory_counts: tuple[int, ...] = (10_000, 100_000),
) -> dict[str, Any]:
    """Measure the grid; seconds per request, ratios, bytes per queued request."""
    grid_points = [(f, q) for f in flows for q in queues]
    backlog_points = [(q, b) for q in (queues[0], queues[-1]) for b in backlogs]
    steps = [saturated_level(q, f) for f, q in grid_points]
    steps += [saturated_level(q, flows[-1], backlog=b) for q, b in backlog_points]
    costs = _interleaved_medians(steps, n, repeats)
    cost_of = dict(zip(grid_points + backlog_points, costs, strict=True))
    grid: dict[str, Any] = {}
    for flow_count in flows:
        row = [cost_of[(flow_count, q)] for q in queues]
        grid[str(flow_count)] = {
            "queues": list(queues),
            "seconds": row,
            "ratio_to_first": [c / row[0] for c in row],
        }
        print(
            f"  {flow_count:>6} flows: "
            + ", ".join(f"{q} queues {c * 1e6:.2f} µs" for q, c in zip(queues, row, strict=True))
        )
    backlog: dict[str, Any] = {}
    for queue_count in (queues[0], queues[-1]):
        row = [cost_of[(queue_count, b)] for b in backlogs]
        backlog[str(queue_count)] = {
            "backlog": list(backlogs),
            "seconds": row,
            "ratio_to_first": [c / row[0] for c in row],
        }
        print(
            f"  {queue_count:>5} queues, {flows[-1]} flows: "
            + ", ".join(
                f"{b:,} queued {c * 1e6:.2f} µs" for b, c in zip(backlogs, row, strict=True)
            )
        )
    # Every point came from the same interleaved rounds, so any two compare: the cheapest
    # point of the whole grid against the most expensive.
    spread = {"cheapest_seconds": min(costs), "dearest_seconds": max(costs)}
    spread["ratio"] = spread["dearest_seconds"] / spread["cheapest_seconds"]
    print(f"  dearest / cheapest point of the grid: {spread['ratio']:.2f}x")
    memory: dict[str, Any] = {}
    for count in memory_counts:
        engine, shell = memory_per_queued_request(count)
        memory[str(count)] = {"engine_bytes": engine, "shell_bytes": shell}
        print(f"  {count:,} queued: engine {engine:.0f} B, through Limiter.admit {shell:.0f} B")
    if len(memory_counts) >= 2:
        # What one more queued request costs: the slope between the smallest and the largest
        # backlog. Per-flow and per-queue state (hands, active queues) is paid once, not per
        # request, and weighs on the averages of small backlogs.
        low, high = min(memory_counts), max(memory_counts)
        marginal = {
            kind: (memory[str(high)][kind] * high - memory[str(low)][kind] * low) / (high - low)
            for kind in ("engine_bytes", "shell_bytes")
        }
        memory["marginal"] = {"between": [low, high], **marginal}
        print(
            f"  one more queued request ({low:,} -> {high:,}): "
            f"engine {marginal['engine_bytes']:.0f} B, "
            f"through Limiter.admit {marginal['shell_bytes']:.0f} B"
        )
    return {
        "by_flows": grid,
        "by_backlog": backlog,
        "spread": spread,
        "memory": memory,
        "n": n,
        "repeats": repeats,
    }


def main() -> None:
    """Run the sweep, print it and write the JSON file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument("--quick", action="store_true", help="smoke test: a small grid")
    args = parser.parse_args()
    started = time.perf_counter()
    info = build_info()
    print(f"apf_limiter build: {info['build']} ({info['queueset_file']})")
    print("Saturated level (limit 100): one arrival that queues + one dispatch, per request")
    if args.quick:
        result = sweep(
            n=2000,
            repeats=1,
            queues=(64, 4096),
            flows=(10, 1000),
            backlogs=(1000, 10_000),
            memory_counts=(2000,),
        )
    else:
        result = sweep()
    result["build"] = info
    result["started"] = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"({time.perf_counter() - started:.0f} s)")
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
