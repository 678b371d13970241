"""Shadow mode reports, request for request, what enforcing the same trace does.

In fake time, with service times that do not depend on load, a trace run with
``enforcement: Shadow`` must report exactly the waits, rejections and Retry-After values of
the same trace enforced: several levels, borrowing, Reject and Queue levels, seats > 1,
final seats with additional latency, and the wait limit.

Every time in a trace carries a distinct irrational offset, so that no two events fall in the
same nanosecond: the order of simultaneous events is an artefact of the harness (a woken task
runs after the call that woke it), not of the limiter.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import EVERYONE_EVERYTHING, limited_level

LEVELS = ("alpha", "beta", "gamma")
USERS = ("u1", "u2", "u3", "u4", "u5", "u6")


@dataclass(frozen=True)
class Arrival:
    at: float
    level: int
    user: int
    seats: int
    final_seats: int
    additional_latency: float
    service: float


def _config(
    server_limit: int, wait_limit: float, shapes: list[tuple[int, int, bool, int]]
) -> dict[str, Any]:
    levels = [
        limited_level(
            name,
            shares,
            lendable=lendable,
            reject=reject,
            queues=queues,
            hand_size=min(2, queues),
            queue_length_limit=3,
        )
        for name, (shares, lendable, reject, queues) in zip(LEVELS, shapes, strict=False)
    ]
    schemas = [
        {
            "name": level["name"],
            "priorityLevelConfiguration": {"name": level["name"]},
            "matchingPrecedence": 100 + index,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": EVERYONE_EVERYTHING[0]["subjects"],
                    "nonResourceRules": [
                        {"verbs": ["*"], "nonResourceURLs": [f"/{level['name']}"]}
                    ],
                }
            ],
        }
        for index, level in enumerate(levels)
    ]
    return {
        "serverConcurrencyLimit": server_limit,
        # Offsets keep the wait limit and the borrowing period off every other event's time.
        "requestWaitLimit": wait_limit + math.sqrt(7) * 1e-5,
        "borrowingPeriod": 0.7 + math.sqrt(11) * 1e-5,
        "priorityLevels": levels,
        "flowSchemas": schemas,
    }


_SHAPE = st.tuples(
    st.integers(1, 40),  # shares
    st.sampled_from([0, 50, 90]),  # lendable percent: borrowing moves the limits
    st.booleans(),  # Reject rather than Queue
    st.integers(1, 4),  # queues
)
_ARRIVAL = st.tuples(
    st.integers(0, 400),  # gap before it, in ms
    st.integers(0, 2),  # level
    st.integers(0, len(USERS) - 1),
    st.integers(1, 3),  # seats
    st.integers(0, 3),  # final seats
    st.sampled_from([0, 0, 150, 900]),  # additional latency, ms
    st.integers(0, 2500),  # service time, ms
)


def random_traces(
    max_examples: int,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Draw a random configuration and trace for a test (this one and simulate's exactness).

    The test takes ``server_limit``, ``wait_limit``, ``shapes`` (levels) and ``raw`` (arrivals).
    """

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        drawn = given(
            server_limit=st.integers(3, 12),
            wait_limit=st.sampled_from([0.4, 1.5, 4.0]),
            shapes=st.lists(_SHAPE, min_size=1, max_size=3),
            raw=st.lists(_ARRIVAL, min_size=1, max_size=40),
        )(test)
        return settings(
            max_examples=max_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(drawn)

    return decorate


def _trace(raw: list[tuple[int, int, int, int, int, int, int]], levels: int) -> list[Arrival]:
    arrivals = []
    at = 0.0
    for index, (gap, level, user, seats, final, latency, service) in enumerate(raw, start=1):
        at += gap / 1000 + index * math.sqrt(2) * 1e-6
        arrivals.append(
            Arrival(
                at=at,
                level=level % levels,
                user=user,
                seats=seats,
                final_seats=final,
                additional_latency=latency / 1000 + (index * math.sqrt(5) * 1e-6 if latency else 0),
                service=service / 1000 + index * math.sqrt(3) * 1e-6,
            )
        )
    return arrivals


def _digest(arrival: Arrival) -> RequestDigest:
    return RequestDigest(
        user=USERS[arrival.user],
        path=f"/{LEVELS[arrival.level]}",
        seats=arrival.seats,
        final_seats=arrival.final_seats,
        additional_latency=arrival.additional_latency,
    )


Outcome = tuple[str, float | str, int | None]


async def _run(config: dict[str, Any], trace: list[Arrival], shadow: bool) -> list[Outcome]:
    clock = FakeClock()
    limiter = Limiter(
        {**config, "enforcement": "Shadow" if shadow else "Enforce"}, clock=clock, hash_seed=42
    )
    outcomes: list[Outcome | None] = [None] * len(trace)
    admissions: list[Any] = [None] * len(trace)

    async def one(index: int, arrival: Arrival) -> None:
        await clock.sleep(arrival.at)
        admission = admissions[index] = limiter.admit(_digest(arrival))
        try:
            async with admission:
                if not shadow:
                    outcomes[index] = ("ran", admission.queue_wait, None)
                await clock.sleep(arrival.service)
        except Rejected as rejected:
            outcomes[index] = ("rejected", rejected.reason, rejected.retry_after)

    tasks = [asyncio.ensure_future(one(i, arrival)) for i, arrival in enumerate(trace)]
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    await clock.run_until_idle()  # twins that outlived their requests finish
    statistics = limiter.statistics()
    for level in statistics.priority_levels.values():
        assert level.waiting_requests == 0 and level.executing_requests == 0
    if shadow:
        for index, admission in enumerate(admissions):
            outcome = admission.shadow
            assert outcome is not None and outcome.decided
            if outcome.rejected:
                outcomes[index] = ("rejected", outcome.reject_reason, outcome.retry_after)
            else:
                outcomes[index] = ("ran", outcome.queue_wait, None)
    assert all(outcome is not None for outcome in outcomes)
    return [outcome for outcome in outcomes if outcome is not None]


def _same(enforced: list[Outcome], shadowed: list[Outcome]) -> None:
    assert len(enforced) == len(shadowed)
    for index, (a, b) in enumerate(zip(enforced, shadowed, strict=True)):
        assert a[0] == b[0], (index, a, b)
        if a[0] == "ran":
            assert isinstance(a[1], float) and isinstance(b[1], float)
            assert math.isclose(a[1], b[1], abs_tol=1e-9), (index, a, b)
        else:
            assert a == b, (index, a, b)


@random_traces(200)
def test_shadow_reports_what_enforcing_does(
    server_limit: int,
    wait_limit: float,
    shapes: list[tuple[int, int, bool, int]],
    raw: list[tuple[int, int, int, int, int, int, int]],
) -> None:
    config = _config(server_limit, wait_limit, shapes)
    trace = _trace(raw, len(shapes))
    enforced = asyncio.run(_run(config, trace, shadow=False))
    shadowed = asyncio.run(_run(config, trace, shadow=True))
    _same(enforced, shadowed)


def test_a_crowded_trace_is_the_same_in_shadow() -> None:
    # A fixed, busy trace (queues fill, waits time out, borrowing moves seats), as a quick
    # example of what the property checks, and a check that it does reject and wait.
    shapes = [(10, 50, False, 2), (10, 90, False, 1), (5, 0, True, 1)]
    raw = [
        (17 * i % 90, i % 3, i % 6, 1 + i % 3, i * 7 % 4, (0, 150, 900)[i % 3], 300 + 97 * i % 900)
        for i in range(40)
    ]
    config = _config(4, 1.5, shapes)
    trace = _trace(raw, 3)
    enforced = asyncio.run(_run(config, trace, shadow=False))
    _same(enforced, asyncio.run(_run(config, trace, shadow=True)))
    kinds = {outcome[0] if outcome[0] == "ran" else outcome[1] for outcome in enforced}
    assert {"ran", "queue-full", "concurrency-limit", "time-out"} <= kinds
    assert any(o[0] == "ran" and isinstance(o[1], float) and o[1] > 0 for o in enforced)
