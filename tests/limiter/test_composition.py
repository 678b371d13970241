"""The shell composed, its periodic work as jobs: the structure the request path relies on.

- ``Limiter`` holds its core (``limiter/_core.py``) instead of inheriting it; an admission and a
  shadow twin call the core's public methods (the internal protocol of the request path), never
  a ``_private`` member of another object.
- Periodic work is jobs of one scheduler (``limiter/_scheduler.py``): a new periodic feature is
  one more job, run by admissions, releases and ``Limiter.run_due()`` when it falls due, without
  a change to the core or the scheduler.
- The scheduler's guard (``now >= scheduler.next_check``) exists in exactly three places: its
  reference ``Core.run_due`` and its inlined copies on the fast path (``Core.arrive`` and
  ``Core.finish``), as ``docs/internals.md`` lists them.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.limiter._core import Core
from apf_limiter.limiter._scheduler import NEVER, Scheduler
from apf_limiter.limiter._shadow import Twins
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config

SHELL = Path(__file__).resolve().parents[2] / "apf_limiter" / "limiter"
DIGEST = RequestDigest(user="alice", groups=("system:authenticated",))


class _Job:
    """A periodic feature written after the fact: every ``period`` seconds, note the time."""

    def __init__(self, scheduler: Scheduler, name: str, due: float, period: float) -> None:
        self.name = name
        self.next_run = due
        self.period = period
        self.scheduler = scheduler
        self.runs: list[tuple[str, float]] = []

    def run(self, now: float) -> None:
        self.runs.append((self.name, now))
        self.scheduler.schedule(self, now + self.period)


def test_the_limiter_holds_its_core_rather_than_inheriting_it() -> None:
    limiter = Limiter(single_level_config(limit=1), hash_seed=0)
    assert Core not in type(limiter).__mro__
    assert isinstance(limiter._core, Core)


async def test_a_new_job_runs_from_admissions_releases_and_run_due() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=1), clock=clock, hash_seed=0)
    scheduler = limiter._core.scheduler
    job = _Job(scheduler, "new", due=1.0, period=1.0)
    scheduler.add(job)
    assert scheduler.next_check == 1.0  # earlier than the first borrowing adjustment (10 s)

    admission = limiter.admit(DIGEST)
    assert admission.start()  # at t = 0: not due
    assert job.runs == []
    await clock.advance(1.5)
    admission.release()  # the release runs it
    assert job.runs == [("new", 1.5)]
    assert scheduler.next_check == 2.5

    await clock.advance(1.0)
    assert limiter.admit(DIGEST).start()  # so does an admission
    assert job.runs == [("new", 1.5), ("new", 2.5)]

    await clock.advance(5.0)
    limiter.run_due()  # and the explicit call after a quiet spell
    assert job.runs[-1] == ("new", 7.5)

    scheduler.remove(job)
    await clock.advance(5.0)
    limiter.run_due()
    assert job.runs[-1] == ("new", 7.5)
    assert scheduler.next_check == 20.0  # the borrowing adjustments' next due time


def test_due_jobs_run_in_order_and_a_job_may_reschedule_another() -> None:
    scheduler = Scheduler()
    assert scheduler.next_check == NEVER
    later = _Job(scheduler, "later", due=5.0, period=10.0)
    first = _Job(scheduler, "first", due=3.0, period=10.0)
    scheduler.add(later)
    scheduler.add(first, first=True)
    assert scheduler.jobs == (first, later)
    assert scheduler.next_check == 3.0
    scheduler.run_due(4.0)  # only the one due
    assert (first.runs, later.runs) == ([("first", 4.0)], [])
    assert scheduler.next_check == 5.0

    class _Postponer(_Job):
        def run(self, now: float) -> None:
            super().run(now)
            self.scheduler.schedule(later, NEVER)  # e.g. a reload switching a feature off

    postponer = _Postponer(scheduler, "postponer", due=5.0, period=10.0)
    scheduler.add(postponer, first=True)
    scheduler.run_due(6.0)
    assert later.runs == []  # looked at after the job before it ran: no longer due
    assert scheduler.next_check == 14.0  # first's next run (its last one was at 4.0)


def test_a_job_removed_by_the_one_before_it_does_not_run() -> None:
    scheduler = Scheduler()
    removed = _Job(scheduler, "removed", due=1.0, period=1.0)

    class _Remover(_Job):
        def run(self, now: float) -> None:
            super().run(now)
            self.scheduler.remove(removed)

    remover = _Remover(scheduler, "remover", due=1.0, period=1.0)
    scheduler.add(remover)
    scheduler.add(removed)
    scheduler.run_due(1.0)
    assert removed.runs == []
    assert scheduler.jobs == (remover,)


def test_the_twins_count_lives_with_the_twins() -> None:
    limiter = Limiter(single_level_config(limit=1), hash_seed=0, max_shadow_twins=1)
    twins = limiter._core.twins
    assert isinstance(twins, Twins) and twins.limit == 1 and twins.outliving == 0
    assert twins.outlive()
    assert not twins.outlive()  # at the cap: not counted
    twins.outlived()
    assert twins.outliving == 0
    with pytest.raises(ValueError, match="max_shadow_twins"):
        Twins(limiter._core, -1)


def _private_reaches(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``: a private member of another object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_admission_and_twins_call_no_private_member_of_another_object() -> None:
    found = [
        *_private_reaches(SHELL / "_admission.py"),
        *_private_reaches(SHELL / "_shadow.py"),
    ]
    # The one exception: an admission is built from the limiter, and takes its core.
    assert found == [
        f"_admission.py:{_line(SHELL / '_admission.py', 'limiter._core')}: limiter._core"
    ]


def _line(path: Path, text: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if f"= {text}" in line:
            return number
    raise AssertionError(f"{text} not found in {path}")


def _guards(path: Path) -> list[str]:
    """The functions comparing ``now`` with a ``next_check``: the scheduler's guard."""
    tree = ast.parse(path.read_text())
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.ops[0], ast.GtE)
                and isinstance(node.comparators[0], ast.Attribute)
                and node.comparators[0].attr == "next_check"
            ):
                found.append(f"{path.stem}.{function.name}")
    return found


def test_the_scheduler_guard_is_in_run_due_and_its_two_listed_copies_only() -> None:
    found = sorted(guard for path in sorted(SHELL.glob("*.py")) for guard in _guards(path))
    assert found == ["_core.arrive", "_core.finish", "_core.run_due"]
    internals = (SHELL.parents[1] / "docs" / "internals.md").read_text()
    assert "inlined in `Core.arrive` and `Core.finish`" in internals


def test_the_periodic_work_is_three_jobs_the_file_check_first(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    path.write_text(json.dumps(single_level_config(limit=1)))
    limiter = Limiter.from_file(path, reload=True, reload_interval=1.0, clock=FakeClock())
    core = limiter._core
    assert core.scheduler.jobs == (limiter._reloader, core.adjustments, core.adaptive)
    assert core.adaptive.next_run == NEVER  # adaptiveConcurrency is off
    assert core.scheduler.next_check == 1.0  # the file's first check
    limiter.close()
    assert core.scheduler.next_check == 10.0  # the borrowing adjustments go on


def test_a_reconfiguration_turns_the_adaptive_job_on_and_off() -> None:
    limiter = Limiter(single_level_config(limit=10), clock=FakeClock())
    adaptive = limiter._core.adaptive
    assert adaptive.adapter is None and adaptive.next_run == NEVER
    config = single_level_config(limit=10)
    config["adaptiveConcurrency"] = {"minLimit": 2, "maxLimit": 40}
    limiter.reconfigure(config)
    assert adaptive.adapter is limiter._core.adapter is not None
    due = adaptive.adapter.next_update
    assert adaptive.next_run == due < 10.0  # before the first borrowing adjustment
    assert limiter._core.scheduler.next_check == due
    limiter.reconfigure(single_level_config(limit=10))
    assert adaptive.adapter is None and adaptive.next_run == NEVER
    assert limiter._core.scheduler.next_check == 10.0
