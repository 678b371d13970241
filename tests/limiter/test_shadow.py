"""Shadow mode in the shell: runs at once, reports would-be outcomes, flips live, stays bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apf_limiter import Limiter, Rejected, RequestDigest, ShadowOutcome
from apf_limiter.observability import Observer
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


def _config(enforcement: str = "Shadow", **shape: Any) -> dict[str, Any]:
    return {**single_level_config(**shape), "enforcement": enforcement}


def _user(name: str) -> RequestDigest:
    return RequestDigest(user=name, path="/x")


class _Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def request_shadowed(
        self, priority_level: str, flow_schema: str, queue_wait: float | None, reason: str | None
    ) -> None:
        self.events.append(("shadowed", priority_level, queue_wait, reason))

    def request_rejected(self, *args: Any) -> None:
        self.events.append(("rejected", *args))

    def request_dispatched(
        self, priority_level: str, flow_schema: str, queue_wait: float, exempt: bool
    ) -> None:
        self.events.append(("dispatched", priority_level, queue_wait))

    def request_finished(self, priority_level: str, flow_schema: str, execution: float) -> None:
        self.events.append(("finished", priority_level, execution))


async def test_nothing_waits_or_is_rejected_and_each_request_learns_its_fate() -> None:
    clock = FakeClock()
    recorder = _Recorder()
    limiter = Limiter(
        _config(limit=1, queue_length_limit=1, wait_limit=5.0), clock=clock, observer=recorder
    )
    first, second, third = (limiter.admit(_user(name)) for name in ("a", "b", "c"))
    async with first, second, third:  # would be: run, wait, queue-full
        assert first.shadow == ShadowOutcome(True, 0.0)
        assert second.shadow == ShadowOutcome(False)  # its twin waits behind the first
        rejected = third.shadow
        assert rejected is not None and rejected.rejected and rejected.retry_after is not None
        assert rejected == ShadowOutcome(True, None, "queue-full", rejected.retry_after)
        assert second.queue_wait == third.queue_wait == 0.0  # the real requests did not wait
        await clock.advance(2.0)
    # The first ended at 2 s: the second's twin is dispatched then, and would have waited 2 s.
    assert second.shadow == ShadowOutcome(True, 2.0)
    assert ("rejected",) not in [event[:1] for event in recorder.events]
    shadowed = [event for event in recorder.events if event[0] == "shadowed"]
    assert shadowed == [
        ("shadowed", "test", 0.0, None),
        ("shadowed", "test", None, "queue-full"),
        ("shadowed", "test", 2.0, None),
    ]
    dispatched = [event for event in recorder.events if event[0] == "dispatched"]
    assert dispatched == [("dispatched", "test", 0.0)] * 3  # as they really ran
    finished = [event for event in recorder.events if event[0] == "finished"]
    assert finished == [("finished", "test", 2.0)] * 3
    # The second's twin runs 2 s from its own start: the level is busy until 4 s.
    assert limiter.statistics().priority_levels["test"].executing_requests == 1
    await clock.advance(2.0)
    assert limiter.statistics().priority_levels["test"].executing_requests == 0


async def test_enforced_levels_report_no_shadow_and_levels_can_differ() -> None:
    clock = FakeClock()
    config = single_level_config(limit=1)
    config["priorityLevelEnforcement"] = {"catch-all": "Shadow"}
    limiter = Limiter(config, clock=clock)
    enforced = limiter.admit(_user("a"))
    assert enforced.start() and enforced.shadow is None
    waiting = limiter.admit(_user("b"))
    assert not waiting.start()  # the test level still enforces
    waiting.release()
    enforced.release()


async def test_a_reject_level_in_shadow_runs_what_it_would_reject() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(limit=1, reject=True), clock=clock)
    holder, extra = limiter.admit(_user("a")), limiter.admit(_user("b"))
    async with holder, extra:
        assert extra.shadow is not None and extra.shadow.reject_reason == "concurrency-limit"
        await extra.wait()  # admitted: waits for nothing, raises nothing


async def test_a_wait_limit_passing_is_a_would_be_time_out() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(limit=1, wait_limit=1.0), clock=clock)
    holder, late = limiter.admit(_user("a")), limiter.admit(_user("b"))
    async with holder:
        async with late:
            pass  # ends at once; its twin still waits
        await clock.advance(1.5)
        assert late.shadow is not None
        assert (late.shadow.decided, late.shadow.reject_reason) == (True, "time-out")


async def test_twins_that_outlive_their_requests_are_capped_and_counted() -> None:
    clock = FakeClock()
    recorder = _Recorder()
    limiter = Limiter(
        _config(limit=1, queue_length_limit=50, wait_limit=30.0),
        clock=clock,
        observer=recorder,
        max_shadow_twins=2,
    )
    holder = limiter.admit(_user("holder"))
    assert holder.start()
    quick = [limiter.admit(_user(f"q{i}")) for i in range(5)]
    for admission in quick:
        assert admission.start()  # runs at once; its twin queues
        admission.release()  # and ends: its twin outlives it
    stats = limiter.statistics().priority_levels["test"]
    assert stats.waiting_requests == 2  # only 2 twins may outlive their requests
    assert [a.shadow for a in quick[2:]] == [ShadowOutcome(False, None, "dropped")] * 3
    dropped = [e for e in recorder.events if e[0] == "shadowed" and e[3] == "dropped"]
    assert len(dropped) == 3
    assert limiter._core.twins.outliving == 2
    holder.release()
    await clock.run_until_idle()
    assert [a.shadow.decided for a in quick[:2]] == [True, True]  # type: ignore[union-attr]
    assert limiter._core.twins.outliving == 0
    assert limiter.statistics().priority_levels["test"].executing_requests == 0
    with pytest.raises(ValueError, match="max_shadow_twins"):
        Limiter(_config(), max_shadow_twins=-1)


async def test_a_reload_flips_shadow_mode_both_ways_without_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "apf.json"
    import json

    def write(enforcement: str) -> None:
        path.write_text(json.dumps(_config(enforcement, limit=1, wait_limit=30.0)))

    write("Enforce")
    limiter = Limiter.from_file(path, clock=clock)
    holder = limiter.admit(_user("holder"))
    assert holder.start()
    queued = limiter.admit(_user("queued"))
    assert not queued.start()  # enforced: it waits
    write("Shadow")
    assert limiter.reload()
    shadowed = limiter.admit(_user("shadowed"))
    assert shadowed.start() and shadowed.shadow == ShadowOutcome(False)
    write("Enforce")
    assert limiter.reload()
    late = limiter.admit(_user("late"))
    assert not late.start()  # enforced again
    holder.release()  # the enforced waiter goes first, its place kept across the flips
    assert queued.phase.name == "QUEUED"
    await queued.wait()
    queued.release()
    assert shadowed.shadow is not None and shadowed.shadow.queue_wait == 0.0
    shadowed.release()  # its twin, dispatched after the real request ended, runs 0 s
    await clock.advance(0)
    await late.wait()
    late.release()
    await clock.run_until_idle()
    assert limiter.statistics().priority_levels["test"].executing_requests == 0


async def test_an_admission_in_shadow_mode_never_raises_rejected() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(limit=1, queue_length_limit=1), clock=clock)
    admissions = [limiter.admit(_user(f"u{i}")) for i in range(10)]
    try:
        for admission in admissions:
            await admission.__aenter__()
    except Rejected:  # pragma: no cover - the failure this test is for
        pytest.fail("shadow mode raised Rejected")
    outcomes = [admission.shadow for admission in admissions]
    assert sum(1 for o in outcomes if o is not None and o.rejected) == 8
    for admission in admissions:
        await admission.__aexit__(None, None, None)
        admission.release()  # idempotent
    await asyncio.sleep(0)


async def test_a_twin_dropped_while_it_holds_seats_is_counted_once() -> None:
    # Its outcome was known (and reported: a would-be wait) when it was dispatched; the cap
    # only cuts its hold short. Reporting it as dropped too counted one request twice.
    clock = FakeClock()
    recorder = _Recorder()
    limiter = Limiter(_config(limit=1), clock=clock, observer=recorder, max_shadow_twins=0)
    holder, late = limiter.admit(_user("holder")), limiter.admit(_user("late"))
    assert holder.start() and late.start()  # both run; the late one's twin queues
    await clock.advance(1.0)
    holder.release()  # the holder's own engine request ends: the twin is dispatched
    await clock.advance(0)
    assert late.shadow == ShadowOutcome(True, 1.0)
    late.release()  # the real request ends; no twin may outlive it: dropped while running
    await clock.advance(0)
    outcomes = [e for e in recorder.events if e[0] == "shadowed" and e[1] == "test"]
    late_outcomes = [e for e in outcomes if e[2] != 0.0]  # the holder would have run at once
    assert late_outcomes == [("shadowed", "test", 1.0, None)]
    assert late.shadow == ShadowOutcome(True, 1.0)
    assert limiter.statistics().priority_levels["test"].executing_requests == 0
