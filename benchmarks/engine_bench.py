"""Engine benchmarks, reported as ratios against baselines measured in the same run.

Run: ``.venv/bin/python -m benchmarks.engine_bench`` (``--quick`` for a short run).

1. Uncontended ``admit`` + release, classification included, against ``asyncio.Semaphore``
   and ``anyio.CapacityLimiter`` acquire + release (in the same rounds), with the default
   configuration and with 20 flow schemas
   (:func:`benchmarks.interleave.interleaved_samples`: warmed up, rotated rounds; the median of
   the per-round ratios is reported).
2. Saturated admit with queueing, then dispatch: :func:`saturated_level` builds the level;
   :mod:`benchmarks.saturation_bench` measures the grid of queues, flows and backlogs.
3. Memory per queued request (tracemalloc), engine only and through the async shell.
4. With ``--instructions`` (needs valgrind): the fast path counted under callgrind, per
   admission and per semaphore round (deterministic, unlike the time).

The results go to ``benchmarks/results/engine.json`` (``--out`` to choose another file).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from apf_limiter import Limiter, RequestDigest
from apf_limiter.config._sources import load_config
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._request import RequestState
from benchmarks.bench_app import build_info
from benchmarks.callgrind import available as callgrind_available
from benchmarks.callgrind import instructions_per_operation
from benchmarks.interleave import interleaved_samples, median_ratio, run_fast_path
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = [
    "USER",
    "counted_fast_path",
    "fast_path",
    "level_config",
    "main",
    "memory_per_queued_request",
    "saturated_level",
    "twenty_schemas_config",
]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "engine.json"
SEMAPHORE = "asyncio.Semaphore"
CAPACITY_LIMITER = "anyio.CapacityLimiter"
USER = RequestDigest(user="alice", groups=("system:authenticated",), path="/api/items")


def level_config(
    limit: int, queues: int, hand_size: int, queue_length_limit: int
) -> dict[str, Any]:
    """One queuing level whose limit is ``limit`` seats, matched by everyone, per user."""
    return {
        "serverConcurrencyLimit": limit,
        "priorityLevels": [
            {
                "name": "bench",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {
                            "queues": queues,
                            "handSize": hand_size,
                            "queueLengthLimit": queue_length_limit,
                        },
                    },
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "bench",
                "priorityLevelConfiguration": {"name": "bench"},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            }
        ],
    }


def twenty_schemas_config() -> dict[str, Any]:
    """The default levels plus 20 flow schemas of mixed rules, the last one matching."""
    schemas = []
    for i in range(19):
        kind = i % 4
        if kind == 0:
            subject = {"kind": "User", "user": {"name": f"user-{i}"}}
        elif kind == 1:
            subject = {"kind": "Group", "group": {"name": f"team-{i}"}}
        elif kind == 2:
            subject = {
                "kind": "ServiceAccount",
                "serviceAccount": {"namespace": f"ns{i}", "name": "*"},
            }
        else:
            subject = {"kind": "Group", "group": {"name": "system:authenticated"}}
        rule: dict[str, Any] = {"subjects": [subject]}
        if kind == 3:
            rule["nonResourceRules"] = [{"verbs": ["post", "put"], "nonResourceURLs": [f"/v{i}/*"]}]
        else:
            rule["nonResourceRules"] = [{"verbs": ["get"], "nonResourceURLs": [f"/svc{i}"]}]
        schemas.append(
            {
                "name": f"schema-{i:02d}",
                "priorityLevelConfiguration": {"name": "global-default"},
                "matchingPrecedence": 100 + i,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [rule],
            }
        )
    schemas.append(
        {
            "name": "everyone",
            "priorityLevelConfiguration": {"name": "global-default"},
            "matchingPrecedence": 5000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        }
    )
    return {
        "priorityLevels": [
            {
                "name": "global-default",
                "limited": {
                    "nominalConcurrencyShares": 100,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50},
                    },
                },
            }
        ],
        "flowSchemas": schemas,
    }


async def fast_path(rounds: int, n: int) -> dict[str, tuple[float, float]]:
    """Per-operation seconds and ratio to the semaphore (medians over interleaved rounds).

    Also, per configuration, the ratio to ``anyio.CapacityLimiter`` (the pure-Python target:
    no dearer than it), as the rows ``<configuration> / anyio.CapacityLimiter``.
    """
    semaphore = asyncio.Semaphore(10)
    capacity_limiter = anyio.CapacityLimiter(10)
    limiters = {
        "default config": Limiter(hash_seed=1),
        "20 flow schemas": Limiter(twenty_schemas_config(), hash_seed=1),
    }

    async def sem() -> None:
        async with semaphore:
            pass

    async def capacity() -> None:
        async with capacity_limiter:
            pass

    def apf(limiter: Limiter) -> Callable[[], Awaitable[None]]:
        async def body() -> None:
            async with limiter.admit(USER):
                pass

        return body

    bodies = {
        SEMAPHORE: sem,
        CAPACITY_LIMITER: capacity,
        **{name: apf(lim) for name, lim in limiters.items()},
    }
    samples = await interleaved_samples(bodies, rounds, n)
    result = {
        name: (statistics.median(times), median_ratio(times, samples[SEMAPHORE]))
        for name, times in samples.items()
    }
    for name in limiters:
        result[f"{name} / {CAPACITY_LIMITER}"] = (
            statistics.median(samples[name]),
            median_ratio(samples[name], samples[CAPACITY_LIMITER]),
        )
    return result


def saturated_level(
    queues: int, flows: int, backlog: int = 2000, limit: int = 100
) -> Callable[[int], float]:
    """Fill a level (``limit`` running, ``backlog`` waiting) and return a timed step function.

    ``step(n)`` does ``n`` times: one arrival that must queue, and one completion that
    dispatches the next waiting request; it returns the seconds per request.
    """
    config = load_config(level_config(limit, queues, 5, 1_000_000))
    controller = Controller(config, hash_seed=9, now=0.0)
    digests = [RequestDigest(user=f"user{i}") for i in range(flows)]
    executing = []
    clock = [0.0]
    for i in range(limit + backlog):
        request, _ = controller.start(digests[i % flows], 0.0)
        if request.state is RequestState.EXECUTING:
            executing.append(request)
    position = [0, 0]

    def step(n: int) -> float:
        now = clock[0]
        slot, arrival = position
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(n):
                now += 0.0001
                controller.start(digests[arrival % flows], now)
                arrival += 1
                dispatched = controller.finish(executing[slot], now)
                executing[slot] = dispatched.dispatched[0]
                slot = (slot + 1) % limit
            elapsed = time.perf_counter() - start
        finally:
            gc.enable()
        clock[0] = now
        position[:] = [slot, arrival]
        return elapsed / n

    step(min(flows, 20_000))  # warm the caches: every flow has arrived once
    return step


def memory_per_queued_request(count: int) -> tuple[float, float]:
    """Bytes per queued request: (engine only, through the async shell)."""
    config = load_config(level_config(1, 4096, 5, 1_000_000))
    digests = [RequestDigest(user=f"user{i}") for i in range(1000)]

    controller = Controller(config, hash_seed=9, now=0.0)
    controller.start(digests[0], 0.0)  # takes the only seat
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [controller.start(digests[i % 1000], 0.0)[0] for i in range(count)]
    engine = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()
    assert all(r.state is RequestState.WAITING for r in kept)

    async def shell() -> float:
        limiter = Limiter(config, hash_seed=9)  # the real clock: asyncio timer handles
        release = asyncio.Event()

        async def hold() -> None:
            async with limiter.admit(digests[0]):
                await release.wait()

        async def wait(digest: RequestDigest) -> None:
            async with limiter.admit(digest, wait_limit=60):
                pass

        async def idle() -> None:
            await release.wait()

        loop = asyncio.get_running_loop()
        holder = loop.create_task(hold())
        await asyncio.sleep(0)
        gc.collect()
        # Baseline in the same run: the same number of tasks that wait on an event.
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        idlers = [loop.create_task(idle()) for _ in range(count)]
        await asyncio.sleep(0)
        per_idle_task = (tracemalloc.get_traced_memory()[0] - base) / count
        tracemalloc.stop()
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tasks = [loop.create_task(wait(digests[i % 1000])) for i in range(count)]
        await asyncio.sleep(0)
        per_request = (tracemalloc.get_traced_memory()[0] - base) / count - per_idle_task
        tracemalloc.stop()
        assert limiter.statistics().waiting_requests == count
        release.set()
        await asyncio.gather(holder, *tasks, *idlers)
        return per_request

    return engine, asyncio.run(shell())


async def _count(variant: str, n: int) -> None:
    # A child of counted_fast_path(), under callgrind: a warm-up, then n admissions.
    semaphore = asyncio.Semaphore(10)
    limiter = Limiter(hash_seed=1)
    for _ in range(200 + n):
        if variant == SEMAPHORE:
            async with semaphore:
                pass
        else:
            async with limiter.admit(USER):
                pass


def counted_fast_path(short: int = 2_000, long: int = 6_000) -> dict[str, float]:
    """Instructions per fast-path admission (built-in configuration) and per semaphore round.

    Under callgrind (:mod:`benchmarks.callgrind`), in this directory: run from a compiled tree
    to count the compiled build.
    """
    command = [sys.executable, "-m", "benchmarks.engine_bench", "--count"]
    counts = {
        name: instructions_per_operation([*command, name], "--n", short, long, Path.cwd())
        for name in (SEMAPHORE, "default config")
    }
    counts["ratio"] = counts["default config"] / counts[SEMAPHORE]
    return counts


def main() -> None:
    """Run the benchmarks, print a report and write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (for smoke tests)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count the fast path's instructions under callgrind (needs valgrind)",
    )
    parser.add_argument("--count", help=argparse.SUPPRESS)  # a child under callgrind
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        asyncio.run(_count(args.count, args.n))
        return
    info = build_info()
    print(f"apf_limiter build: {info['build']} ({info['queueset_file']})")

    print("1. Uncontended admit + release (classification included), interleaved rounds")
    timed = run_fast_path(fast_path, quick=args.quick)

    print("2. Saturated engine: see benchmarks/saturation_bench.py (the whole grid, interleaved)")

    print("3. Memory per queued request")
    count = 20_000 if args.quick else 100_000
    engine, shell = memory_per_queued_request(count)
    print(f"   engine only: {engine:6.0f} B")
    print(f"   through Limiter.admit, beyond an idle waiting task: {shell:6.0f} B")

    result = {
        "build": info,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        **timed,
        "memory": {"queued": count, "engine_bytes": engine, "shell_bytes": shell},
    }
    if args.instructions and callgrind_available():
        counted = counted_fast_path()
        print(
            f"4. Counted: {counted['default config']:,.0f} instructions per admission, "
            f"{counted[SEMAPHORE]:,.0f} per semaphore round: {counted['ratio']:.2f}x"
        )
        result["instructions"] = counted
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
