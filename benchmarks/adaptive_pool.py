"""Criterion (f)'s setting in fake time: closed-loop clients, APF, a strict pool of 20 slots.

The same shape as :mod:`benchmarks.adaptive_http` without the noise of real time: ``clients``
closed-loop clients (each sends its next request when the last one ended) through a
:class:`~apf_limiter.Limiter` configured as ``pool_apf`` (one level, 64 queues, hand size 6),
into a FIFO :class:`asyncio.Semaphore` of 20 held for 50 ms (± ``jitter``, seeded). Unlike the
processor-sharing backend of :mod:`benchmarks.adaptive_sim`, this pool does not slow down past
its knee: a request beyond the 20th waits in the pool's line, and that wait counts as its
execution time for APF. A run is exact and repeatable, so static limits and the adaptive one
can be set side by side without rounds.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from typing import Any

from apf_limiter import Limiter, RequestDigest
from apf_limiter._demo.app import demo_config
from apf_limiter.testing import FakeClock
from benchmarks.adaptive_sim import percentile

__all__ = ["POOL_SIZE", "closed_loop"]

POOL_SIZE = 20
_HOLD = 0.05


async def _closed_loop(
    limit: int, adaptive: bool, users: int, clients: int, duration: float, jitter: float
) -> tuple[list[tuple[float, float]], list[int]]:
    clock = FakeClock()
    config = demo_config(limit, queue_length_limit=200)
    config["requestWaitLimit"] = 60
    if adaptive:
        config["adaptiveConcurrency"] = {"minLimit": 2, "maxLimit": 1000}
    limiter = Limiter(config, clock=clock, hash_seed=1)
    pool = asyncio.Semaphore(POOL_SIZE)
    noise = random.Random(1)
    completed: list[tuple[float, float]] = []
    limits: list[int] = []

    async def client(number: int) -> None:
        digest = RequestDigest(user=f"user-{number % users}", groups=("clients",), path="/work")
        while True:
            sent = clock.now()
            async with limiter.admit(digest), pool:
                await clock.sleep(_HOLD + noise.uniform(-jitter, jitter))
            completed.append((clock.now(), clock.now() - sent))

    async def sample_limits() -> None:
        while True:
            limits.append(limiter.statistics().server_concurrency_limit)
            await clock.sleep(1.0)

    tasks = [asyncio.create_task(client(number)) for number in range(clients)]
    tasks.append(asyncio.create_task(sample_limits()))
    try:
        await clock.advance(duration)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        limiter.close()
    return completed, limits


def closed_loop(
    limit: int,
    *,
    adaptive: bool = False,
    users: int = 1,
    clients: int = 60,
    duration: float = 60.0,
    warmup: float = 15.0,
    jitter: float = 0.005,
) -> dict[str, Any]:
    """One run: throughput, p50 and p99 after ``warmup``, and ServerCL after it.

    Args:
        limit: ServerCL (the start, when ``adaptive``).
        adaptive: Learn ServerCL (``adaptiveConcurrency`` as ``pool_apf`` sets it).
        users: Distinct users the clients are spread over (1: one flow, as over HTTP).
        clients: Closed-loop clients.
        duration: Simulated seconds.
        warmup: Seconds left out of the figures.
        jitter: The pool's hold time varies uniformly by ± this (seconds).
    """
    completed, limits = asyncio.run(_closed_loop(limit, adaptive, users, clients, duration, jitter))
    latencies = [latency for at, latency in completed if at >= warmup]
    settled = limits[int(warmup) :]
    return {
        "server_limit": limit,
        "adaptive": adaptive,
        "users": users,
        "rps": round(len(latencies) / (duration - warmup), 1),
        "p50": round(percentile(latencies, 0.5), 4),
        "p99": round(percentile(latencies, 0.99), 4),
        "limit_median": statistics.median(settled),
        "limit_range": [min(settled), max(settled)],
    }
