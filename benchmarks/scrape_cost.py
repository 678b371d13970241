"""A scrape's cost against the depth of the queues: 30, 300 and 3,000 requests waiting.

Run: ``.venv/bin/python -m benchmarks.scrape_cost`` (``--quick`` for a short run).

The built-in configuration, its ``global-default`` level's seats all held, then 30, 300 or
3,000 requests waiting there (fake clock: nothing times out). One scrape is
``prometheus_client.generate_latest`` of a registry holding only the limiter's metrics. The
three depths are timed in interleaved, rotated rounds (:mod:`benchmarks.interleave`) and the
median of the per-round ratios to the 30-request case is reported, for two kinds of traffic:

* ``100 flows``: the waiting requests from 100 users, in turn (one flow alone could not queue
  3,000: its hand of 6 queues of 50 holds 300);
* ``distinct flows``: every waiting request from a user of its own, scraped with
  ``top_flows=0`` and with ``top_flows=5`` (the top-flow gauges rank the flows waiting, so
  their cost follows the number of distinct flows waiting, not of requests).

Before issue 25 a scrape copied and counted every waiting request: at 3,000 it cost about
50 times the 30-request scrape. The results go to ``benchmarks/results/scrape_cost.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from apf_limiter import Admission, Limiter, RequestDigest
from apf_limiter.observability import PrometheusMetrics
from apf_limiter.testing import FakeClock
from benchmarks.bench_app import build_info
from benchmarks.interleave import interleaved_rounds
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = ["main", "queued", "scrape_costs"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "scrape_cost.json"
DEPTHS = (30, 300, 3000)
KINDS: dict[str, tuple[int, int]] = {
    # name: (users, 0 for a user per request; top_flows)
    "100 flows, top_flows=5": (100, 5),
    "distinct flows, top_flows=0": (0, 0),
    "distinct flows, top_flows=5": (0, 5),
}


def _digest(i: int) -> RequestDigest:
    return RequestDigest(user=f"user-{i}", groups=("system:authenticated",), path="/x")


def queued(depth: int, users: int, top_flows: int) -> tuple[CollectorRegistry, list[Any]]:
    """A registry whose limiter has ``global-default``'s seats held and ``depth`` waiting."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, top_flows=top_flows)
    limiter = Limiter(clock=FakeClock(), hash_seed=1, observer=metrics)
    metrics.bind(limiter)
    limit = limiter.statistics().priority_levels["global-default"].current_limit
    held: list[Admission] = []
    for i in range(limit + depth):
        admission = limiter.admit(_digest(i % users if users else i))
        admission.start()
        held.append(admission)
    waiting = limiter.statistics().waiting_requests
    if waiting != depth:
        raise RuntimeError(f"{waiting} requests waiting, not {depth}")
    return registry, held  # the admissions stay referenced while the registry is scraped


def _scrape(registry: CollectorRegistry) -> Callable[[], Awaitable[None]]:
    async def body() -> None:
        generate_latest(registry)

    return body


async def scrape_costs(rounds: int, n: int) -> dict[str, dict[int, tuple[float, float]]]:
    """Per kind and depth: median seconds per scrape and median ratio to the 30 case."""
    results: dict[str, dict[int, tuple[float, float]]] = {}
    for kind, (users, top_flows) in KINDS.items():
        setups = {depth: queued(depth, users, top_flows) for depth in DEPTHS}
        bodies = {str(depth): _scrape(setups[depth][0]) for depth in DEPTHS}
        timed = await interleaved_rounds(bodies, str(DEPTHS[0]), rounds, n)
        results[kind] = {depth: timed[str(depth)] for depth in DEPTHS}
    return results


def main() -> None:
    """Run the benchmark, print a report and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (for smoke tests)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    args = parser.parse_args()
    info = build_info()
    print(f"apf_limiter build: {info['build']} ({info['queueset_file']})")
    rounds, n = (3, 2) if args.quick else (9, 10)
    costs = asyncio.run(scrape_costs(rounds, n))
    print("One scrape, by requests waiting (medians of interleaved rounds; ratio to 30 waiting)")
    for kind, by_depth in costs.items():
        cells = "   ".join(
            f"{depth:5d}: {seconds * 1e3:6.2f} ms {ratio:5.2f}x"
            for depth, (seconds, ratio) in by_depth.items()
        )
        print(f"   {kind:30s} {cells}")
    result = {
        "build": info,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rounds": rounds,
        "n": n,
        "scrape": {
            kind: {
                str(depth): {"seconds": seconds, "ratio": ratio}
                for depth, (seconds, ratio) in by_depth.items()
            }
            for kind, by_depth in costs.items()
        },
    }
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
