"""The cost of Prometheus metrics on the fast path, as a ratio to metrics off (same run).

Run: ``.venv/bin/python -m benchmarks.metrics_overhead`` (``--quick`` for a short run).

1. Uncontended ``admit`` + release with no observer, with a no-op :class:`Observer` (what the
   limiter's hook calls cost by themselves), and with :class:`PrometheusMetrics` bound to the
   limiter, in interleaved rounds; the median of the per-round ratios to "metrics off" is
   reported. With metrics on, each admission costs three observer calls (arrival, dispatch,
   finish), each a dictionary lookup and a few additions.
2. The cost of one scrape (``generate_latest``) of the default configuration with requests
   waiting and executing, for reference (scrapes happen every few seconds, not per request).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, generate_latest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.observability import PrometheusMetrics
from apf_limiter.observer import Observer

USER = RequestDigest(user="alice", groups=("system:authenticated",), path="/api/items")


async def _time_loop(body: Callable[[], Awaitable[None]], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await body()
    return (time.perf_counter() - start) / n


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
    samples: dict[str, list[float]] = {name: [] for name in limiters}
    ratios: dict[str, list[float]] = {name: [] for name in limiters}
    for limiter in limiters.values():
        await _time_loop(_admit(limiter), n // 10)  # warm up
    for _ in range(rounds):
        base = 0.0
        for name, limiter in limiters.items():
            cost = await _time_loop(_admit(limiter), n)
            base = base or cost
            samples[name].append(cost)
            ratios[name].append(cost / base)
    return {
        name: (statistics.median(samples[name]), statistics.median(ratios[name]))
        for name in limiters
    }


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
    """Run the benchmarks and print a report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (for smoke tests)")
    args = parser.parse_args()
    rounds, n = (3, 20_000) if args.quick else (9, 100_000)
    print("1. Uncontended admit + release (medians of interleaved rounds; ratio to metrics off)")
    for name, (seconds, ratio) in asyncio.run(fast_path(rounds, n)).items():
        print(f"   {name:15s} {seconds * 1e6:7.2f} µs   {ratio:5.2f}x")
    cost = asyncio.run(scrape_cost(20 if args.quick else 100))
    print("2. One scrape of the default configuration, requests executing and waiting")
    print(f"   {cost * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
