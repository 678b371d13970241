"""The adaptive limit with service times spread widely in a level, measured.

The latency ratio compares each level's mean execution time with a baseline of the same mean
(``apf_limiter/engine/_adaptive.py``), so exponentially distributed work reads ~1 while the
backend keeps up, as ±10% work does; the former signal (the mean over a low percentile) read
it as congestion and the limit fell to ``minLimit``. This runs the criteria-(a) setting
(:mod:`benchmarks.adaptive_bench`: C = 20, 1.2 × load, two levels) from 10 × C and from
C / 5 with both kinds of work, Gradient and AIMD, and reports the limit and the throughput
over the last minute of two.

``python -m benchmarks.adaptive_spread`` prints the table and writes
``benchmarks/results/adaptive_spread.json``. See docs/adaptive.md, "Failure modes".
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from benchmarks.adaptive_bench import LOAD
from benchmarks.adaptive_sim import Run, simulate
from benchmarks.result_file import write_result

__all__ = ["main", "spread"]

_DEFAULT_OUT = Path(__file__).parent / "results" / "adaptive_spread.json"


def spread(algorithm: str, capacity: int, start: int, exponential: bool) -> dict[str, Any]:
    """One run of 120 s: the limit (min, median, max) and throughput over its last 60 s."""
    run = Run(
        capacity=((0.0, float(capacity)),),
        load=LOAD,
        duration=120.0,
        server_limit=start,
        adaptive={"algorithm": algorithm},
        exponential=exponential,
    )
    result = simulate(run)
    limits = result.limits_between(60.0, 120.0)
    return {
        "algorithm": algorithm,
        "work": "exponential" if exponential else "±10%",
        "start": start,
        "limit_min": min(limits),
        "limit_median": statistics.median(limits),
        "limit_max": max(limits),
        "throughput": result.throughput(60.0, 120.0),
    }


def main(argv: list[str] | None = None) -> None:
    """Run both kinds of work from both starts, print the table, write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=20, help="the backend's knee C")
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT)
    args = parser.parse_args(argv)
    capacity = args.capacity
    rows = [
        spread(algorithm, capacity, start, exponential)
        for exponential in (False, True)
        for algorithm in ("Gradient", "AIMD")
        for start in (10 * capacity, max(1, capacity // 5))
    ]
    for row in rows:
        print(
            f"{row['algorithm']:8} {row['work']:11} from {row['start']:3}: limit "
            f"{row['limit_min']}–{row['limit_max']} (median {row['limit_median']:g}), "
            f"{row['throughput']:.1f} req/s"
        )
    result = {"capacity": capacity, "load": LOAD, "runs": rows}
    write_result(result, args.out, default=_DEFAULT_OUT, quick=False)


if __name__ == "__main__":
    main()
