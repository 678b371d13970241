"""Engine benchmarks, reported as ratios against baselines measured in the same run.

Run: ``.venv/bin/python -m benchmarks.engine_bench`` (``--quick`` for a short run).

1. Uncontended ``admit`` + release, classification included, against ``asyncio.Semaphore``
   acquire + release (interleaved rounds; the median of the per-round ratios is reported).
2. Saturated admit with queueing, then dispatch, per request, at 64 and 4096 queues and with
   10 and 10,000 flows (sans-IO controller; the cost ratio across each range is reported).
3. Memory per queued request (tracemalloc), engine only and through the async shell.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from apf_limiter import Limiter, RequestDigest
from apf_limiter.config.loader import load_config
from apf_limiter.engine.controller import Controller
from apf_limiter.engine.request import RequestState

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


async def _time_loop(body: Callable[[], Awaitable[None]], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await body()
    return (time.perf_counter() - start) / n


async def fast_path(rounds: int, n: int) -> dict[str, tuple[float, float]]:
    """Per-operation seconds and ratio to the semaphore (medians over interleaved rounds)."""
    semaphore = asyncio.Semaphore(10)
    limiters = {
        "default config": Limiter(hash_seed=1),
        "20 flow schemas": Limiter(twenty_schemas_config(), hash_seed=1),
    }

    async def sem() -> None:
        async with semaphore:
            pass

    def apf(limiter: Limiter) -> Callable[[], Awaitable[None]]:
        async def body() -> None:
            async with limiter.admit(USER):
                pass

        return body

    samples: dict[str, list[float]] = {"asyncio.Semaphore": []}
    ratios: dict[str, list[float]] = {name: [] for name in limiters}
    for name in limiters:
        samples[name] = []
    for _ in range(rounds):
        base = await _time_loop(sem, n)
        samples["asyncio.Semaphore"].append(base)
        for name, limiter in limiters.items():
            cost = await _time_loop(apf(limiter), n)
            samples[name].append(cost)
            ratios[name].append(cost / base)
    result = {"asyncio.Semaphore": (statistics.median(samples["asyncio.Semaphore"]), 1.0)}
    for name in limiters:
        result[name] = (statistics.median(samples[name]), statistics.median(ratios[name]))
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
                executing[slot] = dispatched[0]
                slot = (slot + 1) % limit
            elapsed = time.perf_counter() - start
        finally:
            gc.enable()
        clock[0] = now
        position[:] = [slot, arrival]
        return elapsed / n

    step(min(flows, 20_000))  # warm the caches: every flow has arrived once
    return step


def saturated(queues: int, flows: int, n: int) -> float:
    """Seconds per request for arrive-into-queue + a completion that dispatches one."""
    return saturated_level(queues, flows)(n)


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


def main() -> None:
    """Run every benchmark and print a report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (for smoke tests)")
    args = parser.parse_args()
    rounds, n = (3, 20_000) if args.quick else (7, 100_000)

    print("1. Uncontended admit + release (classification included)")
    for name, (seconds, ratio) in asyncio.run(fast_path(rounds, n)).items():
        print(f"   {name:20s} {seconds * 1e6:7.2f} µs   {ratio:5.2f}x")

    print("2. Saturated: enqueue + dispatch per request (backlog 2000, limit 100)")
    count = 20_000 if args.quick else 100_000
    results = {}
    for queues in (64, 4096):
        for flows in (10, 10_000):
            results[(queues, flows)] = saturated(queues, flows, count)
            print(
                f"   queues {queues:5d} flows {flows:6d}  {results[(queues, flows)] * 1e6:7.2f} µs"
            )
    for flows in (10, 10_000):
        ratio = results[(4096, flows)] / results[(64, flows)]
        print(f"   64 -> 4096 queues at {flows} flows: {ratio:.2f}x")
    for queues in (64, 4096):
        ratio = results[(queues, 10_000)] / results[(queues, 10)]
        print(f"   10 -> 10000 flows at {queues} queues: {ratio:.2f}x")

    print("3. Memory per queued request")
    engine, shell = memory_per_queued_request(20_000 if args.quick else 100_000)
    print(f"   engine only: {engine:6.0f} B")
    print(f"   through Limiter.admit, beyond an idle waiting task: {shell:6.0f} B")


if __name__ == "__main__":
    main()
