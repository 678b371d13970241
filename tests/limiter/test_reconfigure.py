"""Live reconfiguration: atomic, validated first, no request lost (file reloads: test_reload)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from apf_limiter import Admission, ConfigError, Limiter, Rejected, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import (
    EVERYONE_EVERYTHING,
    limited_level,
    single_level_config,
    subject_schema,
)


def _level(name: str, shares: int, queues: int, hand: int) -> dict[str, Any]:
    return limited_level(
        name, shares, lendable=30, queues=queues, hand_size=hand, queue_length_limit=20
    )


def _schema(name: str, level: str, group: str, precedence: int) -> dict[str, Any]:
    return subject_schema(name, level, group=group, precedence=precedence)


def _config(levels: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> dict[str, Any]:
    fallback = {
        "name": "fallback",
        "priorityLevelConfiguration": {"name": levels[0]["name"]},
        "matchingPrecedence": 9000,
        "rules": EVERYONE_EVERYTHING,
    }
    return {
        "serverConcurrencyLimit": 12,
        "priorityLevels": levels,
        "flowSchemas": [*schemas, fallback],
    }


async def test_invalid_config_raises_and_changes_nothing() -> None:
    limiter = Limiter(single_level_config(limit=3), clock=FakeClock())
    before = limiter.config
    stats_before = limiter.statistics()
    bad = single_level_config(limit=3)
    bad["priorityLevels"][0]["limited"]["lendablePercent"] = 101
    bad["flowSchemas"][0]["matchingPrecedence"] = 0.5
    with pytest.raises(ConfigError) as info:
        limiter.reconfigure(bad)
    assert len(info.value.problems) == 2
    assert limiter.config is before
    assert limiter.statistics().priority_levels == stats_before.priority_levels


async def test_queued_and_executing_requests_survive_reconfiguration() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1, queues=4, hand_size=2), clock=clock)
    done: list[str] = []

    async def run(user: str) -> None:
        async with limiter.admit(RequestDigest(user=user)):
            await clock.sleep(1)
        done.append(user)

    tasks = [asyncio.get_running_loop().create_task(run(f"u{i}")) for i in range(4)]
    await clock.advance(0.5)
    # More queues, a different hand, a raised limit: everything keeps going.
    limiter.reconfigure(single_level_config(limit=2, queues=8, hand_size=3))
    level = limiter.statistics().priority_levels["test"]
    assert (level.queues, level.current_limit) == (8, 2)
    assert level.executing_requests == 2  # the raised limit dispatched one at once
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    assert sorted(done) == ["u0", "u1", "u2", "u3"]


async def test_removed_busy_level_quiesces_then_disappears_and_can_return() -> None:
    clock = FakeClock()
    two = _config(
        [_level("a", 10, 4, 2), _level("b", 10, 4, 2)],
        [_schema("fs-a", "a", "ga", 100), _schema("fs-b", "b", "gb", 100)],
    )
    limiter = Limiter(two, clock=clock)
    release = asyncio.Event()

    async def hold(group: str) -> None:
        async with limiter.admit(RequestDigest(user="u", groups=(group,))):
            await release.wait()

    task = asyncio.get_running_loop().create_task(hold("gb"))
    await clock.advance(0)
    nominal_a = limiter.statistics().priority_levels["a"].nominal_limit
    one = _config([_level("a", 10, 4, 2)], [_schema("fs-a", "a", "ga", 100)])
    limiter.reconfigure(one)
    stats = limiter.statistics()
    assert stats.priority_levels["b"].quiescing
    assert stats.priority_levels["b"].executing_requests == 1
    assert "fs-b" not in stats.flow_schemas
    # New requests of b's old users now go elsewhere.
    async with limiter.admit(RequestDigest(user="u", groups=("gb",))) as admission:
        assert admission.priority_level == "a"
    # Shares still count while b drains: a's nominal limit is unchanged.
    assert stats.priority_levels["a"].nominal_limit == nominal_a
    release.set()
    await task
    stats = limiter.statistics()
    assert "b" not in stats.priority_levels
    # With b gone, a's share of the server grows.
    assert stats.priority_levels["a"].nominal_limit > nominal_a
    # A level that reappears is created again and works.
    limiter.reconfigure(two)
    async with limiter.admit(RequestDigest(user="u", groups=("gb",))) as admission:
        assert admission.priority_level == "b"


async def test_a_level_removed_and_configured_again_keeps_its_retry_after() -> None:
    # dropped_requests_tracker.go: the dropped-requests tracker is kept per level name for good.
    clock = FakeClock(start=100.0)
    config = single_level_config(limit=1, reject=True)
    limiter = Limiter(config, clock=clock)

    def drop(count: int) -> int:
        retry_after = 0
        for _ in range(count):
            with pytest.raises(Rejected) as rejected:
                limiter.admit(RequestDigest(user="u")).start()
            retry_after = rejected.value.retry_after
        return retry_after

    holder = limiter.admit(RequestDigest(user="holder"))
    assert holder.start()
    for second, count in ((100, 5), (101, 11), (102, 1), (103, 11)):
        await clock.advance(second - clock.now())
        retry_after = drop(count)
    assert retry_after == 4
    holder.release()
    limiter.reconfigure({**config, "priorityLevels": [], "flowSchemas": []})
    assert "test" not in limiter.statistics().priority_levels
    limiter.reconfigure(config)
    holder = limiter.admit(RequestDigest(user="holder"))
    assert holder.start()
    assert drop(1) == 4  # the same second: counted, and the level's value stands


# Levels a and b, then a alone; no periodic adjustment during the tests (period 1000 s).
_BOTH = {
    **_config(
        [_level("a", 10, 4, 2), _level("b", 10, 4, 2)],
        [_schema("fs-a", "a", "ga", 100), _schema("fs-b", "b", "gb", 100)],
    ),
    "borrowingPeriod": 1000,
}
_A_ONLY = {
    **_config([_level("a", 10, 4, 2)], [_schema("fs-a", "a", "ga", 100)]),
    "borrowingPeriod": 1000,
}


def _lingering_at_b(limiter: Limiter) -> Admission:
    """A request of level b, started: 1 seat, then 1 final seat held for 10 s."""
    admission = limiter.admit(
        RequestDigest(user="u", groups=("gb",), seats=1, final_seats=1, additional_latency=10.0)
    )
    assert admission.start()
    return admission


async def test_a_level_holding_only_lingering_seats_is_idle_and_dropped() -> None:
    # Kubernetes' idle is "nothing waiting, nothing executing" (queueset.go, isIdleLocked):
    # final seats held for an additional latency do not keep a removed level alive.
    clock = FakeClock()
    limiter = Limiter(_BOTH, clock=clock)
    nominal_a = limiter.statistics().priority_levels["a"].nominal_limit
    _lingering_at_b(limiter).release()  # finished; its final seat is held for 10 s
    assert limiter.statistics().priority_levels["b"].executing_seats == 1
    adjustments = limiter.statistics().adjustments
    limiter.reconfigure(_A_ONLY)
    stats = limiter.statistics()
    assert "b" not in stats.priority_levels  # dropped at once, not quiescing
    assert stats.priority_levels["a"].nominal_limit > nominal_a
    assert stats.adjustments == adjustments + 1  # the reconfiguration's own adjustment
    # The final seat goes back into the dropped level later: nothing else happens.
    await clock.advance(10.0)
    assert limiter.statistics().adjustments == adjustments + 1
    assert "b" not in limiter.statistics().priority_levels


async def test_a_removed_level_is_dropped_when_its_last_request_finishes_lingering() -> None:
    clock = FakeClock()
    limiter = Limiter(_BOTH, clock=clock)
    admission = _lingering_at_b(limiter)
    limiter.reconfigure(_A_ONLY)
    assert limiter.statistics().priority_levels["b"].quiescing  # it is still executing
    adjustments = limiter.statistics().adjustments
    admission.release()  # finishes: the level is idle although its final seat is held
    assert "b" not in limiter.statistics().priority_levels
    assert limiter.statistics().adjustments == adjustments + 1
    await clock.advance(10.0)  # the final seat's release does not drop it a second time
    assert limiter.statistics().adjustments == adjustments + 1


async def test_level_reappearing_while_quiescing_is_reused() -> None:
    clock = FakeClock()
    two = _config(
        [_level("a", 10, 4, 2), _level("b", 10, 4, 2)],
        [_schema("fs-a", "a", "ga", 100), _schema("fs-b", "b", "gb", 100)],
    )
    limiter = Limiter(two, clock=clock)
    release = asyncio.Event()

    async def hold() -> None:
        async with limiter.admit(RequestDigest(user="u", groups=("gb",))):
            await release.wait()

    task = asyncio.get_running_loop().create_task(hold())
    await clock.advance(0)
    limiter.reconfigure(_config([_level("a", 10, 4, 2)], [_schema("fs-a", "a", "ga", 100)]))
    assert limiter.statistics().priority_levels["b"].quiescing
    limiter.reconfigure(two)
    level = limiter.statistics().priority_levels["b"]
    assert not level.quiescing
    assert (level.executing_requests, level.dispatched) == (1, 1)
    release.set()
    await task
    assert limiter.statistics().priority_levels["b"].dispatched == 1


def _random_config(rng: random.Random) -> dict[str, Any]:
    names = rng.sample(["red", "green", "blue", "cyan"], rng.randint(1, 4))
    levels = []
    for name in names:
        queues = rng.choice([1, 2, 4, 8, 16])
        levels.append(_level(name, rng.randint(0, 40), queues, rng.randint(1, min(queues, 4))))
    schemas = [
        _schema(f"fs-{name}", name, f"g{rng.randrange(3)}", 100 + i) for i, name in enumerate(names)
    ]
    return _config(levels, schemas)


async def test_reconfiguration_under_load_loses_and_duplicates_nothing() -> None:
    clock = FakeClock()
    rng = random.Random(2024)
    limiter = Limiter(_random_config(rng), clock=clock, hash_seed=5)
    executions: dict[int, int] = {}
    outcomes: dict[int, str] = {}

    async def one(i: int) -> None:
        digest = RequestDigest(user=f"user{i % 7}", groups=(f"g{i % 3}",))
        try:
            async with limiter.admit(digest, wait_limit=2.0):
                executions[i] = executions.get(i, 0) + 1
                await clock.sleep(rng.choice([0.01, 0.1, 0.5]))
            outcome = "executed"
        except Rejected as exc:
            outcome = exc.reason
        assert i not in outcomes, "a request ended twice"
        outcomes[i] = outcome

    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    for step in range(60):
        tasks.extend(loop.create_task(one(step * 20 + k)) for k in range(20))
        await clock.advance(0.05)
        if step % 3 == 0:
            if step % 9 == 0:
                current = limiter.config
                with pytest.raises(ConfigError):
                    bad = _random_config(rng)
                    bad["priorityLevels"][0]["limited"]["limitResponse"]["queuing"]["handSize"] = 99
                    limiter.reconfigure(bad)
                assert limiter.config is current
            else:
                limiter.reconfigure(_random_config(rng))
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    assert len(outcomes) == 1200
    assert all(count == 1 for count in executions.values())
    assert set(executions) == {i for i, o in outcomes.items() if o == "executed"}
    assert set(outcomes.values()) >= {"executed"}
    stats = limiter.statistics()
    assert stats.executing_requests == 0 and stats.waiting_requests == 0
    assert stats.executing_seats == 0
    assert not any(level.quiescing for level in stats.priority_levels.values())
