"""Interleaved, rotated timing rounds: how the fast-path benchmarks compare variants.

The machines are 2 noisy, shared cores, so a variant is only ever compared with a baseline
timed in the same round. Every variant is warmed up first; each round then times all of
them, starting one variant further on each time, so that none is always first (cold) or
always right after the same neighbour.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

__all__ = [
    "FastPath",
    "interleaved_rounds",
    "interleaved_samples",
    "median_ratio",
    "run_fast_path",
    "time_loop",
]

#: A fast-path benchmark: ``measure(rounds, n)`` gives, per variant, (seconds, ratio).
FastPath = Callable[[int, int], Coroutine[Any, Any, dict[str, tuple[float, float]]]]


async def time_loop(body: Callable[[], Awaitable[None]], n: int) -> float:
    """Seconds per call of ``await body()``, over ``n`` calls in a tight loop."""
    start = time.perf_counter()
    for _ in range(n):
        await body()
    return (time.perf_counter() - start) / n


async def interleaved_samples(
    bodies: Mapping[str, Callable[[], Awaitable[None]]], rounds: int, n: int
) -> dict[str, list[float]]:
    """Time every body in rotated rounds; per body, the seconds per call of each round.

    Args:
        bodies: Variant name to the operation to time.
        rounds: Timing rounds (each times every variant once).
        n: Calls per timing.
    """
    names = list(bodies)
    for name in names:
        await time_loop(bodies[name], max(1, n // 10))  # warm up
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        for offset in range(len(names)):
            name = names[(round_ + offset) % len(names)]
            samples[name].append(await time_loop(bodies[name], n))
    return samples


def median_ratio(times: list[float], base: list[float]) -> float:
    """The median of the per-round ratios of ``times`` to ``base`` (timed in the same rounds)."""
    return statistics.median(t / b for t, b in zip(times, base, strict=True))


async def interleaved_rounds(
    bodies: Mapping[str, Callable[[], Awaitable[None]]], baseline: str, rounds: int, n: int
) -> dict[str, tuple[float, float]]:
    """Time every body in rotated rounds; per body, the median seconds and ratio to baseline.

    Args:
        bodies: Variant name to the operation to time; ``baseline`` among them.
        baseline: The variant every ratio is taken against, within each round.
        rounds: Timing rounds (each times every variant once).
        n: Calls per timing.

    Returns:
        Variant name to (median seconds per call, median of the per-round ratios).
    """
    samples = await interleaved_samples(bodies, rounds, n)
    base = samples[baseline]
    return {
        name: (statistics.median(times), median_ratio(times, base))
        for name, times in samples.items()
    }


def run_fast_path(measure: FastPath, *, quick: bool) -> dict[str, Any]:
    """Run a fast-path benchmark (9 rounds of 100,000; ``quick``: 3 of 20,000), print its table.

    Returns:
        The part of the result file it fills: ``rounds``, ``n`` and ``fast_path`` (per
        variant, ``seconds`` and ``ratio``).
    """
    rounds, n = (3, 20_000) if quick else (9, 100_000)
    fast = asyncio.run(measure(rounds, n))
    for name, (seconds, ratio) in fast.items():
        print(f"   {name:42s} {seconds * 1e6:7.2f} µs   {ratio:5.2f}x")
    return {
        "rounds": rounds,
        "n": n,
        "fast_path": {name: {"seconds": t, "ratio": r} for name, (t, r) in fast.items()},
    }
