"""Jobs in an asyncio service, with priorities and a flow per tenant: no HTTP words.

Run it::

    python examples/worker_pool.py            # about 5 s
    python examples/worker_pool.py --seconds 2

Ten workers' worth of capacity, two priority levels: ``interactive`` (jobs users wait for) and
``batch``; inside each level every tenant is its own flow (``ByTenant``). A batch tenant dumps
its whole backlog at once; the interactive tenants keep submitting a job now and then. The
interactive jobs keep flowing with short waits, and the batch backlog drains at its share
(plus what it borrows): what does not fit in its queues is retried after ``Retry-After``
(``guard(..., retry_for=...)``) rather than dropped. It prints, per tenant, the jobs done and
rejected and the p50 / p99 wait from submission to start (retry pauses included).
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

from apf_limiter import Limiter, Rejected
from apf_limiter.jobs import Job, guard, guarded

CONFIG: dict[str, Any] = {
    "serverConcurrencyLimit": 10,
    "requestWaitLimit": 3,
    "borrowingPeriod": 1,  # re-share idle seats every second (Kubernetes: 10 s)
    "priorityLevels": [
        {"name": "interactive", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 50}},
        # Batch keeps half of its seats: a level whose lower limit is 0 admits nothing while
        # idle levels lend everything away. Short queues: a backlog beyond them is retried.
        {
            "name": "batch",
            "limited": {
                "nominalConcurrencyShares": 20,
                "lendablePercent": 50,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10},
                },
            },
        },
    ],
    "flowSchemas": [
        {"name": "exports", "priorityLevelConfiguration": {"name": "batch"},
         "jobs": {"kinds": ["export"]}, "distinguisherMethod": {"type": "ByTenant"}},
        {"name": "interactive", "priorityLevelConfiguration": {"name": "interactive"},
         "jobs": {"kinds": ["*"]}, "distinguisherMethod": {"type": "ByTenant"},
         "matchingPrecedence": 2000},
    ],
}  # fmt: skip


@dataclass
class Tally:
    done: int = 0
    rejected: int = 0
    waits: list[float] = field(default_factory=list)


async def export(limiter: Limiter, tenant: str, tally: Tally) -> None:
    """A batch job that must not be dropped: retried after Retry-After for up to a minute."""
    loop = asyncio.get_running_loop()
    submitted = loop.time()
    async with guard(limiter, Job("export", tenant=tenant), retry_for=60):
        # From submission, pauses between tries included: admission.queue_wait is only the
        # last try's wait in its queue.
        tally.waits.append(loop.time() - submitted)
        await asyncio.sleep(0.1)  # the job itself
    tally.done += 1


async def simulate(seconds: float) -> dict[str, Tally]:
    limiter = Limiter(CONFIG)
    tallies: dict[str, Tally] = {}
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    @guarded(limiter, "preview", tenant=lambda tenant, tally: tenant)
    async def preview(tenant: str, tally: Tally) -> None:
        """An interactive job: a user waits for it, so a rejection is shown, not retried."""
        await asyncio.sleep(0.05)

    async def run_preview(tenant: str, tally: Tally) -> None:
        started = loop.time()
        try:
            await preview(tenant, tally)
        except Rejected:
            tally.rejected += 1
            return
        tally.waits.append(loop.time() - started - 0.05)
        tally.done += 1

    # The batch tenant dumps its whole backlog at once.
    batch = tallies.setdefault("etl (batch)", Tally())
    jobs = [asyncio.create_task(export(limiter, "etl", batch)) for _ in range(int(40 * seconds))]

    async def interactive(tenant: str, seed: int) -> None:
        tally = tallies.setdefault(f"{tenant} (interactive)", Tally())
        jitter = random.Random(seed)
        while loop.time() < end:
            jobs.append(asyncio.create_task(run_preview(tenant, tally)))
            await asyncio.sleep(jitter.uniform(0.05, 0.15))

    await asyncio.gather(interactive("alice", 1), interactive("bob", 2))
    await asyncio.gather(*jobs)
    limiter.close()
    return tallies


def _p(values: Sequence[float], fraction: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{max(0.0, ordered[max(1, math.ceil(fraction * len(ordered))) - 1]) * 1000:.0f} ms"


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
