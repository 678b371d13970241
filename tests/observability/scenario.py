"""A small scripted overload scenario shared by the observability tests.

Three limited levels share ``serverConcurrencyLimit: 3``: ``queued`` (2 seats, one queue of
length 2), ``rejecting`` (1 seat, Reject) and the mandatory ``catch-all`` (1 seat); nothing is
lendable, so borrowing never moves a limit. With ``server_limit=30`` the levels have 20, 10
and 1 seats. Users in group ``rejecters`` go to ``rejecting``,
``system:masters`` to ``exempt``, everyone else to ``queued``.

Also a small learning scenario for the adaptive server limit: :func:`adaptive_config` and
:func:`wave`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import EVERYONE_EVERYTHING, single_level_config

WALL_CLOCK_NS = 1_700_000_000_000_000_000
"""The wall clock the dump tests map the fake clock's ``now`` to (2023-11-14T22:13:20Z)."""


def scenario_config(
    *,
    queues: int = 1,
    hand_size: int = 1,
    distinguisher: bool = False,
    wait_limit: float = 10.0,
    queue_length_limit: int = 2,
    server_limit: int = 3,
) -> dict[str, Any]:
    everyone = EVERYONE_EVERYTHING
    rejecters = [{**everyone[0], "subjects": [{"kind": "Group", "group": {"name": "rejecters"}}]}]
    queued_schema: dict[str, Any] = {
        "name": "queued-users",
        "priorityLevelConfiguration": {"name": "queued"},
        "matchingPrecedence": 500,
        "rules": everyone,
    }
    if distinguisher:
        queued_schema["distinguisherMethod"] = {"type": "ByUser"}
    return {
        "serverConcurrencyLimit": server_limit,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [
            {
                "name": "queued",
                "limited": {
                    "nominalConcurrencyShares": 20000,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {
                            "queues": queues,
                            "handSize": hand_size,
                            "queueLengthLimit": queue_length_limit,
                        },
                    },
                },
            },
            {
                "name": "rejecting",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "limitResponse": {"type": "Reject"},
                },
            },
        ],
        "flowSchemas": [
            {
                "name": "rejecters",
                "priorityLevelConfiguration": {"name": "rejecting"},
                "matchingPrecedence": 100,
                "rules": rejecters,
            },
            queued_schema,
        ],
    }


def user(user_name: str, *groups: str, **fields: Any) -> RequestDigest:
    return RequestDigest(user=user_name, groups=(*groups, "system:authenticated"), **fields)


ADMIN = user("admin", "system:masters", verb="get", path="/healthz")
RITA = user("rita", "rejecters", verb="delete", path="/things/1")
ROB = user("rob", "rejecters")


class Holder:
    """A task that holds one admission until released (or records its rejection)."""

    def __init__(self, limiter: Limiter, digest: RequestDigest, **kwargs: Any) -> None:
        self.release = asyncio.Event()
        self.entered = False
        self.rejected: Rejected | None = None
        self.task = asyncio.get_running_loop().create_task(self._run(limiter, digest, kwargs))

    async def _run(self, limiter: Limiter, digest: RequestDigest, kwargs: dict[str, Any]) -> None:
        try:
            async with limiter.admit(digest, **kwargs):
                self.entered = True
                await self.release.wait()
        except Rejected as exc:
            self.rejected = exc


ADAPTIVE_DIGEST = RequestDigest(user="u", groups=("g",), path="/p")


def adaptive_config() -> dict[str, Any]:
    """One level ``test`` of 10 seats, learning its server limit within 2..40 (``smoothing: 1``).

    Two waves of 30 requests running 0.1 s each, the second from 0.95 s (see :func:`wave`),
    make the first update (at 1 s) grow the limit to 13: latency at its baseline, requests
    waiting.
    """
    return {
        **single_level_config(limit=10, queue_length_limit=100),
        "adaptiveConcurrency": {"minLimit": 2, "maxLimit": 40, "smoothing": 1.0},
    }


async def wave(limiter: Limiter, clock: FakeClock, count: int, hold: float) -> None:
    """``count`` requests at once, each running ``hold`` seconds once admitted."""

    async def one() -> None:
        async with limiter.admit(ADAPTIVE_DIGEST):
            await clock.sleep(hold)

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    while not all(task.done() for task in tasks):
        await clock.advance(0.01)
    await asyncio.gather(*tasks)
