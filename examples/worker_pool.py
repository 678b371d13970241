"""The engine used directly: guard the jobs of an asyncio service, with priorities.

Run it::

    python examples/worker_pool.py            # about 5 s
    python examples/worker_pool.py --seconds 2

Ten workers' worth of capacity, two priority levels: ``interactive`` (jobs users wait for) and
``batch``; inside each level every tenant is its own flow. A batch tenant dumps hundreds of
jobs at once; the interactive tenants keep submitting a job now and then. The interactive jobs
keep flowing with short waits, the batch backlog drains at its share (plus what it borrows),
and jobs that cannot wait are rejected with a retry hint instead of piling up.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from apf_limiter import Limiter, Rejected, RequestDigest


def _queuing(queues: int, hand_size: int, length_limit: int) -> dict[str, Any]:
    return {
        "type": "Queue",
        "queuing": {"queues": queues, "handSize": hand_size, "queueLengthLimit": length_limit},
    }


CONFIG: dict[str, Any] = {
    "serverConcurrencyLimit": 10,
    "requestWaitLimit": 3,
    "borrowingPeriod": 1,  # re-share idle seats every second (Kubernetes: 10 s)
    "priorityLevels": [
        {
            "name": "interactive",
            "limited": {
                "nominalConcurrencyShares": 30,
                "lendablePercent": 50,
                "limitResponse": _queuing(16, 4, 20),
            },
        },
        {
            "name": "batch",
            "limited": {
                # Keep half of its seats: a level whose lower limit is 0 admits nothing
                # while idle levels lend everything away.
                "nominalConcurrencyShares": 20,
                "lendablePercent": 50,
                "limitResponse": _queuing(16, 4, 100),
            },
        },
    ],
    "flowSchemas": [
        {
            "name": "batch-jobs",
            "priorityLevelConfiguration": {"name": "batch"},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "batch"}}],
                    "nonResourceRules": [{"verbs": ["post"], "nonResourceURLs": ["/jobs/*"]}],
                }
            ],
        },
        {
            "name": "interactive-jobs",
            "priorityLevelConfiguration": {"name": "interactive"},
            "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    ],
}


@dataclass
class Tally:
    done: int = 0
    rejected: int = 0
    waits: list[float] = field(default_factory=list)


async def run_job(limiter: Limiter, tenant: str, group: str, work: float, tally: Tally) -> None:
    digest = RequestDigest(user=tenant, groups=(group,), verb="post", path=f"/jobs/{group}")
    try:
        async with limiter.admit(digest) as admission:
            tally.waits.append(admission.queue_wait)
            await asyncio.sleep(work)  # the job itself
        tally.done += 1
    except Rejected:
        tally.rejected += 1  # a real service would retry after rejected.retry_after seconds


async def simulate(seconds: float) -> dict[str, Tally]:
    limiter = Limiter(CONFIG)
    tallies: dict[str, Tally] = {}
    jobs: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    # The batch tenant dumps its whole backlog at once.
    batch = tallies.setdefault("etl (batch)", Tally())
    jobs += [
        asyncio.create_task(run_job(limiter, "etl", "batch", 0.1, batch))
        for _ in range(int(150 * seconds))
    ]

    async def interactive(tenant: str, seed: int) -> None:
        tally = tallies.setdefault(f"{tenant} (interactive)", Tally())
        jitter = random.Random(seed)
        while loop.time() < end:
            jobs.append(asyncio.create_task(run_job(limiter, tenant, "users", 0.05, tally)))
            await asyncio.sleep(jitter.uniform(0.05, 0.15))

    await asyncio.gather(interactive("alice", 1), interactive("bob", 2))
    await asyncio.gather(*jobs)
    limiter.close()
    return tallies


def _p(values: Sequence[float], fraction: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[max(1, math.ceil(fraction * len(ordered))) - 1] * 1000:.0f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long tenants submit jobs")
    args = parser.parse_args(argv)
    tallies = asyncio.run(simulate(args.seconds))
    print(f"{'tenant':<20} {'done':>6} {'rejected':>9} {'wait p50':>9} {'wait p99':>9}")
    for name, tally in tallies.items():
        print(
            f"{name:<20} {tally.done:>6} {tally.rejected:>9} "
            f"{_p(tally.waits, 0.5):>9} {_p(tally.waits, 0.99):>9}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
