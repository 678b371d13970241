"""The engine's read interface, ``Limiter.dump()``: frozen values, the same as the statistics."""

from __future__ import annotations

import dataclasses

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def _digest(user: str, **fields: object) -> RequestDigest:
    return RequestDigest(user=user, groups=("system:authenticated",), **fields)  # type: ignore[arg-type]


async def test_dump_shows_every_request_where_it_is_and_carries_the_statistics() -> None:
    clock = FakeClock(start=100.0)
    limiter = Limiter(single_level_config(limit=1, queues=4, hand_size=2), clock=clock, hash_seed=1)
    running = limiter.admit(_digest("alice", verb="get", additional_latency=2.0))
    assert running.start()
    await clock.advance(1)
    queued = limiter.admit(_digest("bob", verb="create"))
    assert not queued.start()

    dump = limiter.dump()
    assert dump.statistics == limiter.statistics()
    level = next(level for level in dump.levels if level.name == "test")
    assert level.statistics == limiter.statistics().priority_levels["test"]
    assert [q.index for q in level.queues] == [0, 1, 2, 3]
    assert level.desired_num_queues == 4 and level.queue_length_limit == 10
    assert level.hand_size == 2 and level.active_queues == 2
    assert not level.is_idle
    executing = [r for q in level.queues for r in q.executing]
    waiting = [(q.index, r) for q in level.queues for r in q.waiting]
    assert [(r.distinguisher, r.state, r.verb, r.start_time) for r in executing] == [
        ("alice", "EXECUTING", "get", 100.0)
    ]
    [(index, bob)] = waiting
    assert (bob.distinguisher, bob.state, bob.verb, bob.arrival_time) == (
        "bob",
        "WAITING",
        "create",
        101.0,
    )
    assert bob.queue_index == index
    assert next(q for q in level.queues if q.index == index).total_work_sum == bob.total_work
    with pytest.raises(dataclasses.FrozenInstanceError):
        level.active_queues = 0  # type: ignore[misc]

    # Alice finishes: her seat lingers for her additional latency, and Bob waits on.
    running.release()
    lingering = next(level for level in limiter.dump().levels if level.name == "test").lingering
    assert [(r.distinguisher, r.state, r.release_at) for r in lingering] == [
        ("alice", "LINGERING", 103.0)
    ]
    # An earlier dump is a copy: it did not change.
    assert [r.state for q in level.queues for r in q.executing] == ["EXECUTING"]

    await clock.advance(2)  # the seat comes back and Bob runs
    assert queued.phase.name == "QUEUED"  # not yet seen by a waiting task
    level = next(level for level in limiter.dump().levels if level.name == "test")
    assert level.lingering == ()
    assert [r.distinguisher for q in level.queues for r in q.executing] == ["bob"]
    queued.release()
    assert all(level.is_idle for level in limiter.dump().levels)
