"""The cost of Prometheus metrics on the fast path, as a ratio to metrics off (same run).

Run: ``.venv/bin/python -m benchmarks.metrics_overhead`` (``--quick`` for a short run).

1. Uncontended ``admit`` + release with no observer, with a no-op :class:`Observer` (what the
   limiter's hook calls cost by themselves), and with :class:`PrometheusMetrics` bound to the
   limiter, in interleaved rounds (:func:`benchmarks.interleave.interleaved_rounds`); the
   median of the per-round ratios to "metrics off" is reported. With metrics on, each
   admission costs three observer calls (arrival, dispatch, finish), each a dictionary
   lookup and a few additions.
2. The cost of one scrape (``generate_latest``) of the default configuration with requests
   waiting and executing, for reference (scrapes happen every few seconds, not per request).

The results go to ``benchmarks/results/metrics_overhead.json`` (``--out`` for another file).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from apf_limiter import Limiter, RequestDigest
from apf_limiter._observer import Observer
from apf_limiter.observability import PrometheusMetrics
from benchmarks.bench_app import build_info
from benchmarks.interleave import interleaved_rounds, run_fast_path
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = ["fast_path", "main", "scrape_cost"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "metrics_overhead.json"

USER = RequestDigest(user="alice", groups=("system:authenticated",), path="/api/items")


def _admit(limiter: Limiter) -> Callable[[], Awaitable[None]]:
    async def body() -> None:
        async with limiter.admit(USER):
            pass

    return body


async def fast_path(rounds: int, n: int) -> dict[str, tuple[float, float]]:
    """Per-admission seconds and ratio to metrics off (medians over interleaved rounds)."""
    metrics = PrometheusMetrics(CollectorRegistry())
    limiters = {
        "metrics off": Limiter(hash_seed=1),
        "no-op observer": Limiter(hash_seed=1, observer=Observer()),
        "metrics on": Limiter(hash_seed=1, observer=metrics),
    }
    metrics.bind(limiters["metrics on"])
    bodies = {name: _admit(limiter) for name, limiter in limiters.items()}
    return await interleaved_rounds(bodies, "metrics off", rounds, n)


async def scrape_cost(repeats: int) -> float:
    """Seconds per scrape with 100 requests executing and 50 waiting."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = Limiter(hash_seed=1, observer=metrics)
    metrics.bind(limiter)
    release = asyncio.Event()

    async def hold(i: int) -> None:
        digest = RequestDigest(user=f"user-{i}", groups=("system:authenticated",), path="/x")
        async with limiter.admit(digest, wait_limit=60):
            await release.wait()

    limit = limiter.statistics().priority_levels["global-default"].current_limit
    tasks = [asyncio.create_task(hold(i)) for i in range(limit + 50)]
    await asyncio.sleep(0)
    start = time.perf_counter()
    for _ in range(repeats):
        generate_latest(registry)
    elapsed = (time.perf_counter() - start) / repeats
    release.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed


def main() -> None:
    """Run the benchmarks, print a report and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (for smoke tests)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    args = parser.parse_args()
    info = build_info()
    print(f"apf_limiter build: {info['build']} ({info['queueset_file']})")
    print("1. Uncontended admit + release (medians of interleaved rounds; ratio to metrics off)")
    timed = run_fast_path(fast_path, quick=args.quick)
    cost = asyncio.run(scrape_cost(20 if args.quick else 100))
    print("2. One scrape of the default configuration, requests executing and waiting")
    print(f"   {cost * 1e3:7.2f} ms")
    result = {
        "build": info,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        **timed,
        "scrape_seconds": cost,
    }
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
