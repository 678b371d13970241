"""Who is flooding: the bounded heavy-hitters sketch of rejections by flow, per level."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apf_limiter import FlowCount, Limiter, Rejected, RequestDigest
from apf_limiter.engine._heavy_hitters import (
    SKETCH_CAPACITY,
    WINDOW_SECONDS,
    RejectedFlows,
    SpaceSaving,
)
from apf_limiter.testing import FakeClock
from tests.observability.scenario import scenario_config, user


def test_below_capacity_the_counts_are_exact() -> None:
    sketch = SpaceSaving(4)
    for flow in ["a", "b", "a", "c", "a", "b"]:
        sketch.add(("s", flow))
    assert sorted(sketch.items(), key=lambda f: f.distinguisher) == [
        FlowCount("s", "a", 3, 0),
        FlowCount("s", "b", 2, 0),
        FlowCount("s", "c", 1, 0),
    ]


def test_a_new_flow_takes_the_place_and_count_of_the_least_counted() -> None:
    sketch = SpaceSaving(2)
    for flow in ["a", "a", "b", "c"]:
        sketch.add(("s", flow))
    # "b" (1, the oldest of the smallest count) made room for "c", which inherits 1 (+1).
    assert {f.distinguisher: (f.rejections, f.error) for f in sketch.items()} == {
        "a": (2, 0),
        "c": (2, 1),
    }
    assert len(sketch) == 2 and sketch.total == 4


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SpaceSaving(0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=8),
    st.lists(st.integers(min_value=0, max_value=20), max_size=300),
)
def test_space_saving_bounds_hold(capacity: int, stream: list[int]) -> None:
    sketch = SpaceSaving(capacity)
    for value in stream:
        sketch.add(("s", str(value)))
    true = Counter(str(value) for value in stream)
    kept = {flow.distinguisher: flow for flow in sketch.items()}
    assert len(kept) <= capacity
    assert sum(flow.rejections for flow in kept.values()) == len(stream)
    for name, flow in kept.items():
        assert flow.rejections - flow.error <= true[name] <= flow.rejections
    # Every flow above total / capacity is kept.
    for name, count in true.items():
        if count > len(stream) / capacity:
            assert name in kept


def test_a_million_distinct_flows_stay_bounded_and_the_heavy_one_shows_on_top() -> None:
    # 1,000,000 distinct distinguishers, one rejection each, and one real flood: 5% of all
    # rejections, spread through the stream.
    flows = RejectedFlows()
    rng = random.Random(19)
    distinct = 1_000_000
    every = 19  # 1 in 20 rejections is the flooder's
    heavy = 0
    started = time.perf_counter()
    now = 1_000.0  # one half-minute window
    for i in range(distinct):
        flows.record("tenants", f"client-{i}", now)
        if i % every == 0:
            flows.record("tenants", "flooder", now)
            heavy += 1
        if i % 100_000 == 0:
            now += rng.random()
    elapsed = time.perf_counter() - started
    current, previous = flows.sketches()
    assert len(current) <= SKETCH_CAPACITY and len(previous) <= SKETCH_CAPACITY
    assert current.total == distinct + heavy
    top = flows.top(now)
    assert len(top) <= 2 * SKETCH_CAPACITY
    assert (top[0].flow_schema, top[0].distinguisher) == ("tenants", "flooder")
    # Its count is within the sketch's bound of the truth.
    assert top[0].rejections - top[0].error <= heavy <= top[0].rejections
    assert top[0].rejections - top[0].error > top[1].rejections
    # The one-off flows are sure of one rejection each, whatever count they inherited.
    assert {flow.rejections - flow.error for flow in top[1:]} == {1}
    assert elapsed < 10, elapsed


def test_the_window_covers_the_last_minute_at_most() -> None:
    flows = RejectedFlows()
    flows.record("s", "old", 10.0)  # window [0, 30)
    flows.record("s", "new", 35.0)  # window [30, 60): the old one is the previous
    assert [f.distinguisher for f in flows.top(35.0)] == ["new", "old"]
    # At 60 the window [30, 60) is the previous one: "old" (from [0, 30)) is gone.
    assert [f.distinguisher for f in flows.top(60.0)] == ["new"]
    flows.record("s", "newer", 61.0)
    assert [f.distinguisher for f in flows.top(61.0)] == ["new", "newer"]
    # A read a minute after the last window began sees nothing, and neither does a record
    # after a long quiet spell.
    assert flows.top(120.0) == ()
    flows.record("s", "late", 500.0)
    assert [f.distinguisher for f in flows.top(500.0)] == ["late"]


def test_counts_of_both_windows_are_added() -> None:
    flows = RejectedFlows()
    for now in (1.0, 2.0, 31.0):
        flows.record("s", "x", now)
    flows.record("s", "y", 31.0)
    assert flows.top(31.0) == (FlowCount("s", "x", 3, 0), FlowCount("s", "y", 1, 0))


async def test_the_controller_feeds_rejections_and_ended_waits_not_admissions() -> None:
    clock = FakeClock(start=100.0)
    config = scenario_config(
        queues=8, hand_size=2, distinguisher=True, queue_length_limit=1, server_limit=30
    )
    limiter = Limiter(config, clock=clock, hash_seed=3)
    admitted = [limiter.admit(user(f"user-{i}")) for i in range(20)]
    admitted.append(limiter.admit(user("rita", "rejecters")))
    assert all(admission.start() for admission in admitted)  # seats free: the fast path
    waiting = [limiter.admit(user("mallory")) for _ in range(2)]
    assert not any(admission.start() for admission in waiting)  # both queues of her hand
    with pytest.raises(Rejected):
        limiter.admit(user("mallory")).start()  # her hand's queues are full
    level = {level.name: level for level in limiter.dump().levels}
    assert level["queued"].rejected_flows == (FlowCount("queued-users", "mallory", 1, 0),)
    assert level["rejecting"].rejected_flows == ()  # admitted requests are not counted
    waiting[0].release()  # an ended wait counts too (as RejectedRequests does)
    level = {level.name: level for level in limiter.dump().levels}
    assert level["queued"].rejected_flows == (FlowCount("queued-users", "mallory", 2, 0),)
    await clock.advance(2 * WINDOW_SECONDS)
    assert all(level.rejected_flows == () for level in limiter.dump().levels)
    for admission in [*admitted, *waiting]:
        admission.release()


async def test_at_a_shadow_level_the_sketch_counts_would_be_rejections() -> None:
    clock = FakeClock()
    config = {
        **scenario_config(queue_length_limit=1, wait_limit=60, server_limit=30),
        "priorityLevelEnforcement": {"queued": "Shadow"},
    }
    limiter = Limiter(config, clock=clock)
    admissions = [limiter.admit(user(f"user-{i}")) for i in range(22)]
    assert all(admission.start() for admission in admissions)  # all run: shadow mode
    [queued] = [level for level in limiter.dump().levels if level.name == "queued"]
    assert queued.shadow
    # 20 twins hold the seats, one waits, one would be rejected (queue full).
    assert [f.rejections for f in queued.rejected_flows] == [1]
    for admission in admissions:
        admission.release()


def test_a_digest_without_a_distinguisher_is_the_schema_alone() -> None:
    clock = FakeClock()
    limiter = Limiter(scenario_config(server_limit=30), clock=clock)
    held = [limiter.admit(RequestDigest(user="rob", groups=("rejecters",))) for _ in range(10)]
    assert all(admission.start() for admission in held)
    with pytest.raises(Rejected):
        limiter.admit(RequestDigest(user="rita", groups=("rejecters",))).start()
    [rejecting] = [level for level in limiter.dump().levels if level.name == "rejecting"]
    # A Reject level does not hash flows: the flow is its schema (as in dump_requests).
    assert rejecting.rejected_flows == (FlowCount("rejecters", "", 1, 0),)
    for admission in held:
        admission.release()
