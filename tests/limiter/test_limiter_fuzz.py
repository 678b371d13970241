"""Randomized stateful test of the async shell + engine in fake time.

A seeded random driver mixes, on several priority levels (Queue/Reject/exempt, lending and
borrowing): ``async with`` tasks, hand-driven start()/wait()/release(), cancellations,
time-outs, lingering final seats, reconfigurations (valid and invalid) and borrowing
adjustments, and checks invariants after every step.

Run: pytest tests/limiter/test_limiter_fuzz.py   (APF_FUZZ_SEEDS=N for more seeds)
"""

from __future__ import annotations

import asyncio
import copy
import math
import os
import random
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from apf_limiter import ConfigError, Limiter, Rejected, RequestDigest
from apf_limiter._observer import Observer
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import RequestState as S
from apf_limiter.engine._seat_seconds import MASK
from apf_limiter.testing import FakeClock

POOL = ["a", "b", "c", "d"]
GROUPS = [f"g-{n}" for n in POOL] + ["system:masters", "none"]
USERS = ["u1", "u2", "u3", "u4", "u5"]
EPS = 1e-6


# --------------------------------------------------------------------------------------------
# dispatch-time check: a request is dispatched only if it fits (or runs alone, too wide)

_violations: list[str] = []


def _check_fit(qs: QueueSet, request: Any, where: str) -> None:
    if qs.desired_num_queues < 0:
        return  # exempt
    if qs.concurrency_limit <= 0:
        _violations.append(f"{where}: dispatched at {qs.name} with limit 0 (D3): {request!r}")
    elif qs.seats_in_use > qs.concurrency_limit and qs.requests_executing != 1:
        _violations.append(
            f"{where}: {qs.name} seats {qs.seats_in_use} > limit {qs.concurrency_limit} "
            f"with {qs.requests_executing} executing after dispatching {request!r}"
        )


_orig_begin = QueueSet._begin_execution
_orig_start_request = QueueSet.start_request


def _begin(self: QueueSet, request: Any, queue: Any, now: float) -> None:
    _orig_begin(self, request, queue, now)
    _check_fit(self, request, "dispatch")


def _start_request(self: QueueSet, request: Any, now: float) -> Any:
    result = _orig_start_request(self, request, now)
    if request.state is S.EXECUTING and request in result:
        _check_fit(self, request, "arrival")
    return result


# The compiled build's classes cannot be patched: there the dispatch-time check is skipped (the
# invariants checked after every step still run).
_PATCHABLE = (sys.modules[QueueSet.__module__].__file__ or "").endswith(".py")


@pytest.fixture(autouse=True)
def _patched(monkeypatch: pytest.MonkeyPatch) -> None:
    if _PATCHABLE:
        monkeypatch.setattr(QueueSet, "_begin_execution", _begin)
        monkeypatch.setattr(QueueSet, "start_request", _start_request)
    _violations.clear()


# --------------------------------------------------------------------------------------------
# configurations


def gen_level(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "shares": rng.choice([0, 1, 5, 10, 30, 30, 50, 100]),
        "lendable": rng.choice([0, 0, 25, 50, 90, 100, rng.randint(0, 100)]),
        "borrowing": rng.choice([None, None, 0, 50, 100, 200]),
        "reject": rng.random() < 0.25,
    }
    queues = rng.choice([1, 1, 2, 3, 4, 8])
    spec["queues"] = queues
    spec["hand"] = rng.randint(1, queues)
    spec["qll"] = rng.randint(1, 5)
    if spec["shares"] == 0 and spec["borrowing"] == 0:
        spec["borrowing"] = None  # no jails in the random mix
    return spec


def gen_spec(rng: random.Random) -> dict[str, Any]:
    names = rng.sample(POOL, rng.randint(1, 4))
    spec: dict[str, Any] = {
        "scl": rng.randint(2, 16),
        "wait": rng.choice([0.5, 1.0, 2.0, 5.0, 15.0]),
        "period": rng.choice([0.1, 0.5, 1.0, 3.0, 10.0]),
        "levels": {n: gen_level(rng) for n in names},
        "exempt": (
            None
            if rng.random() < 0.5
            else {"shares": rng.choice([0, 5, 20]), "lendable": rng.choice([0, 50, 100])}
        ),
    }
    spec["routes"] = gen_routes(rng, spec)
    return spec


def gen_routes(rng: random.Random, spec: dict[str, Any]) -> dict[str, str]:
    names = list(spec["levels"])
    routes = {}
    for n in POOL:
        if rng.random() < 0.85:
            routes[f"g-{n}"] = (
                n if n in spec["levels"] and rng.random() < 0.8 else rng.choice(names)
            )
    return routes


def build(spec: dict[str, Any]) -> dict[str, Any]:
    levels: list[dict[str, Any]] = []
    if spec["exempt"] is not None:
        levels.append(
            {
                "name": "exempt",
                "exempt": {
                    "nominalConcurrencyShares": spec["exempt"]["shares"],
                    "lendablePercent": spec["exempt"]["lendable"],
                },
            }
        )
    for name, ls in spec["levels"].items():
        limited: dict[str, Any] = {
            "nominalConcurrencyShares": ls["shares"],
            "lendablePercent": ls["lendable"],
        }
        if ls["borrowing"] is not None:
            limited["borrowingLimitPercent"] = ls["borrowing"]
        if ls["reject"]:
            limited["limitResponse"] = {"type": "Reject"}
        else:
            limited["limitResponse"] = {
                "type": "Queue",
                "queuing": {
                    "queues": ls["queues"],
                    "handSize": ls["hand"],
                    "queueLengthLimit": ls["qll"],
                },
            }
        levels.append({"name": name, "limited": limited})
    schemas = []
    for i, (group, level) in enumerate(sorted(spec["routes"].items())):
        schemas.append(
            {
                "name": f"s-{group}",
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 100 + i,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": group}}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            }
        )
    return {
        "serverConcurrencyLimit": spec["scl"],
        "requestWaitLimit": spec["wait"],
        "borrowingPeriod": spec["period"],
        "priorityLevels": levels,
        "flowSchemas": schemas,
    }


def mutate(rng: random.Random, spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(
            ["limit", "level", "level", "remove", "add", "switch", "queues", "settings", "routes"]
        )
        names = list(spec["levels"])
        if kind == "limit":
            spec["scl"] = rng.randint(2, 16)
        elif kind == "level" and names:
            n = rng.choice(names)
            ls = spec["levels"][n]
            key = rng.choice(["shares", "lendable", "borrowing", "qll"])
            fresh = gen_level(rng)
            ls[key] = fresh[key]
            if ls["shares"] == 0 and ls["borrowing"] == 0:
                ls["borrowing"] = None
        elif kind == "remove" and len(names) > 1:
            n = rng.choice(names)
            del spec["levels"][n]
            spec["routes"] = {g: lv for g, lv in spec["routes"].items() if lv != n}
            if rng.random() < 0.5:  # re-route its groups
                spec["routes"].update(
                    {g: rng.choice(list(spec["levels"])) for g in [f"g-{n}"] if rng.random() < 0.7}
                )
        elif kind == "add":
            free = [n for n in POOL if n not in spec["levels"]]
            if free:
                n = rng.choice(free)
                spec["levels"][n] = gen_level(rng)
                spec["routes"][f"g-{n}"] = n
        elif kind == "switch" and names:
            n = rng.choice(names)
            spec["levels"][n]["reject"] = not spec["levels"][n]["reject"]
        elif kind == "queues" and names:
            n = rng.choice(names)
            q = rng.choice([1, 2, 3, 4, 8])
            spec["levels"][n]["queues"] = q
            spec["levels"][n]["hand"] = rng.randint(1, q)
        elif kind == "settings":
            spec["wait"] = rng.choice([0.5, 1.0, 2.0, 5.0, 15.0])
            spec["period"] = rng.choice([0.5, 1.0, 3.0, 10.0])
        elif kind == "routes":
            spec["routes"] = gen_routes(rng, spec)
    return spec


def invalid(rng: random.Random, spec: dict[str, Any]) -> dict[str, Any]:
    config = build(mutate(rng, spec))
    which = rng.randint(0, 4)
    if which == 0:
        config["serverConcurrencyLimit"] = 0
    elif which == 1:
        config["requestWaitLimit"] = 61
    elif which == 2:
        config["flowSchemas"].append(
            {
                "name": "dangling",
                "priorityLevelConfiguration": {"name": "nowhere"},
                "rules": [],
            }
        )
    elif which == 3:
        limited = [lv for lv in config["priorityLevels"] if "limited" in lv]
        limited[0]["limited"]["lendablePercent"] = 101
    else:
        config["priorityLevels"].append({"name": "Bad_Name"})
    return config


# --------------------------------------------------------------------------------------------
# the model


class CountingObserver(Observer):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def _bump(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        self._bump("arrived")

    def request_dispatched(self, pl: str, fs: str, queue_wait: float, exempt: bool) -> None:
        self._bump("dispatched")
        if queue_wait < -1e-9:
            _violations.append(f"negative queue wait {queue_wait!r} at {pl}")

    def request_rejected(self, pl: str, fs: str, reason: str, wait: float, exempt: bool) -> None:
        self._bump("rejected")
        self._bump(f"rejected:{reason}")

    def request_cancelled(self, pl: str, fs: str, queue_wait: float) -> None:
        self._bump("cancelled")

    def request_finished(self, pl: str, fs: str, execution_time: float) -> None:
        self._bump("finished")
        if execution_time < -1e-9:
            _violations.append(f"negative execution time {execution_time!r} at {pl}")


@dataclass
class Rec:
    id: int
    manual: bool
    digest: RequestDigest
    wait_limit: float | None
    wl_eff: float = 0.0
    adm: Any = None
    task: asyncio.Task[None] | None = None  # async-with task or manual waiter task
    outcomes: list[Any] = field(default_factory=list)
    entered: int = 0
    event: asyncio.Event | None = None
    hold: float | None = None
    phase: str = "new"  # new, queued, waiting (task in wait), body, exec, done
    released: int = 0
    ext_released: bool = False
    extra: list[Any] = field(default_factory=list)

    @property
    def request(self) -> Any:
        return None if self.adm is None else self.adm._request


class Fuzzer:
    def __init__(self, seed: int, steps: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.steps = steps
        self.clock = FakeClock(self.rng.choice([0.0, 0.0, 1000.3, 3e6]))
        self.spec = gen_spec(self.rng)
        self.observer = CountingObserver()
        self.limiter = Limiter(
            build(self.spec), clock=self.clock, hash_seed=seed, observer=self.observer
        )
        self.recs: list[Rec] = []
        self.log: list[str] = []
        self.settled = True
        self.extra_tasks: list[asyncio.Task[None]] = []

    # -- helpers --------------------------------------------------------------------------

    def digest(self) -> RequestDigest:
        rng = self.rng
        group = rng.choice(GROUPS)
        groups = ("system:authenticated",) if group == "none" else (group, "system:authenticated")
        seats = rng.choice([None, 1, 1, 1, 2, 3, 5])
        latency = rng.choice([0.0, 0.0, 0.0, 0.5, 1.0, 2.5])
        final = rng.choice([0, 0, 1, 2, 4, 8]) if latency or rng.random() < 0.2 else 0
        return RequestDigest(
            user=rng.choice(USERS),
            groups=groups,
            seats=seats,
            final_seats=final,
            additional_latency=latency,
        )

    def new_rec(self, manual: bool) -> Rec:
        wl = self.rng.choice([None, None, None, 0.0, 0.3, 1.0, 4.0])
        rec = Rec(len(self.recs), manual, self.digest(), wl)
        rec.wl_eff = wl if wl is not None else self.limiter.config.request_wait_limit
        rec.adm = self.limiter.admit(rec.digest, wait_limit=wl)
        self.recs.append(rec)
        return rec

    def outcome(self, rec: Rec, what: Any) -> None:
        rec.outcomes.append(what)

    # -- tasks ----------------------------------------------------------------------------

    async def body_task(self, rec: Rec) -> None:
        try:
            await self._body_task(rec)
        except AssertionError as exc:
            _violations.append(f"in task #{rec.id}: {exc!r}")

    async def _body_task(self, rec: Rec) -> None:
        rec.phase = "waiting"
        if rec.wait_limit is None:  # the configuration's, when the request starts
            rec.wl_eff = self.limiter.config.request_wait_limit
        try:
            async with rec.adm:
                assert rec.adm.queue_wait <= rec.wl_eff + EPS, (rec.id, rec.adm.queue_wait)
                rec.entered += 1
                rec.phase = "body"
                if rec.hold is None:
                    assert rec.event is not None
                    await rec.event.wait()
                else:
                    await self.clock.sleep(rec.hold)
            self.outcome(rec, "ran")
        except Rejected as exc:
            self.outcome(rec, ("rejected", exc.reason))
            if exc.reason == "time-out":
                req = rec.request
                assert self.clock.now() >= req.arrival_time + rec.wl_eff - EPS, (
                    "timed out early",
                    rec.id,
                    self.clock.now(),
                    req.arrival_time,
                    rec.wl_eff,
                )
            assert exc.retry_after >= 1
        except asyncio.CancelledError:
            self.outcome(rec, "cancelled" if not rec.entered else "ran-cancelled")
        except RuntimeError as exc:
            self.outcome(rec, ("runtime", str(exc)))
        finally:
            rec.phase = "done"

    async def wait_task(self, rec: Rec) -> None:
        try:
            await self._wait_task(rec)
        except AssertionError as exc:
            _violations.append(f"in task #{rec.id}: {exc!r}")

    async def _wait_task(self, rec: Rec) -> None:
        rec.phase = "waiting"
        try:
            await rec.adm.wait()
            rec.phase = "exec"
            rec.entered += 1
            self.outcome(rec, "admitted")
        except Rejected as exc:
            rec.phase = "done"
            self.outcome(rec, ("rejected", exc.reason))
        except asyncio.CancelledError:
            rec.phase = "cancelled-wait"  # the admission may still be released (no-op)
            self.outcome(rec, "cancelled")
        except RuntimeError as exc:
            rec.phase = "done"
            self.outcome(rec, ("runtime", str(exc)))

    # -- operations -----------------------------------------------------------------------

    def op_spawn(self) -> None:
        rec = self.new_rec(manual=False)
        if self.rng.random() < 0.5:
            rec.event = asyncio.Event()
        else:
            rec.hold = self.rng.choice([0.0, 0.2, 1.0, 3.0])
        rec.task = asyncio.get_running_loop().create_task(self.body_task(rec))
        self.log.append(f"spawn #{rec.id} {rec.digest} wl={rec.wait_limit} hold={rec.hold}")

    def op_manual_start(self) -> None:
        rec = self.new_rec(manual=True)
        rec.wl_eff = (
            rec.wait_limit if rec.wait_limit is not None else self.limiter.config.request_wait_limit
        )
        timers_before = len(self.clock._timers)
        adjustments_due = self.clock.now() >= self.limiter._core.scheduler.next_check
        try:
            ok = rec.adm.start()
        except Rejected as exc:
            rec.phase = "done"
            self.outcome(rec, ("rejected", exc.reason))
            self.log.append(f"manual #{rec.id} rejected {exc.reason}")
            return
        rec.phase = "exec" if ok else "queued"
        new_timers = len(self.clock._timers) - timers_before
        if ok and not adjustments_due:
            assert new_timers == 0, f"the fast path set {new_timers} timers"
        elif not ok:
            assert 1 <= new_timers <= 2, new_timers  # its wait limit (+ the borrowing timer)
        req = rec.request
        st = self.limiter.statistics().priority_levels[req.priority_level]
        cap = st.max_seats if 0 < st.max_seats <= 100 else 100
        d = rec.digest
        assert req.initial_seats == min(d.seats or 1, cap), (req.initial_seats, d, cap)
        if d.additional_latency > 0 and d.final_seats > cap:
            assert req.final_seats <= cap
            work = d.final_seats * d.additional_latency
            assert abs(req.final_seats * req.additional_latency - work) < 1e-6 * max(1, work)
        if ok:
            rec.entered += 1
            self.outcome(rec, "admitted")
        self.log.append(f"manual #{rec.id} {rec.digest} wl={rec.wait_limit} -> {ok}")

    def op_manual_wait(self) -> None:
        cands = [r for r in self.recs if r.manual and r.phase == "queued"]
        if not cands:
            return
        rec = self.rng.choice(cands)
        rec.phase = "waiting"
        rec.task = asyncio.get_running_loop().create_task(self.wait_task(rec))
        self.log.append(f"wait #{rec.id}")

    def op_manual_release(self) -> None:
        cands = [r for r in self.recs if r.manual and r.phase != "done" and r.released < 2]
        if not cands:
            return
        rec = self.rng.choice(cands)
        self.log.append(f"release #{rec.id} (phase {rec.phase}, state {rec.request.state!r})")
        before = rec.request.state
        rec.adm.release()
        rec.released += 1
        after = rec.request.state
        assert after in (S.DONE, S.LINGERING, S.CANCELLED, S.TIMED_OUT), (before, after)
        if rec.phase in ("queued",):
            if before is S.WAITING:
                self.outcome(rec, "released-waiting")
            elif before is S.EXECUTING:
                self.outcome(rec, "released-dispatched")
            elif before is S.TIMED_OUT:
                self.outcome(rec, "released-timed-out")
            rec.phase = "done"
        elif rec.phase == "exec" or rec.phase == "cancelled-wait":
            rec.phase = "done"
        # phase "waiting": the waiter task reports (RuntimeError) and ends the record
        if self.rng.random() < 0.3:
            rec.adm.release()  # idempotent
            assert rec.request.state is after

    def op_external_release(self) -> None:
        cands = [
            r
            for r in self.recs
            if not r.manual
            and r.request is not None
            and r.phase in ("waiting", "body")
            and not r.ext_released
        ]
        if not cands:
            return
        rec = self.rng.choice(cands)
        self.log.append(f"external release #{rec.id} (phase {rec.phase}, {rec.request.state!r})")
        rec.ext_released = True
        rec.adm.release()
        assert rec.request.state in (S.DONE, S.LINGERING, S.CANCELLED, S.TIMED_OUT)

    def op_extra_wait(self) -> None:
        cands = [r for r in self.recs if r.manual and r.request is not None]
        if not cands:
            return
        rec = self.rng.choice(cands)
        state = rec.request.state
        busy = rec.task is not None and not rec.task.done()
        self.log.append(f"extra wait #{rec.id} ({state!r}, waiter busy {busy})")

        async def extra() -> None:
            state = rec.request.state
            busy = rec.task is not None and not rec.task.done() and rec.phase == "waiting"
            first = state is S.WAITING and not busy and rec.phase == "queued"
            try:
                await rec.adm.wait()
                result: Any = "returned"
            except Rejected as exc:
                result = ("rejected", exc.reason)
            except RuntimeError as exc:
                result = ("runtime", str(exc))
            except asyncio.CancelledError:
                result = "cancelled"
            rec.extra.append((state, busy, result))
            if state is S.EXECUTING and not busy:
                ok = result == "returned"
            elif state is S.TIMED_OUT and not busy:
                ok = result == ("rejected", "time-out")
            elif first:
                ok = True  # a first wait(): result depends on what happens meanwhile
            else:
                ok = result != "returned" or rec.request.state is S.EXECUTING
            if not ok:
                _violations.append(f"extra wait #{rec.id}: {state!r} busy={busy} -> {result}")

        if state is S.WAITING and not busy and rec.phase == "queued":
            return  # that is op_manual_wait's job
        task = asyncio.get_running_loop().create_task(extra())
        self.extra_tasks.append(task)

    def op_scheduled_cancel(self) -> None:
        cands = [r for r in self.recs if r.task is not None and not r.task.done()]
        if not cands:
            return
        rec = self.rng.choice(cands)
        delay = self.rng.choice([0.0, 0.3, 0.5, 1.0, 2.0, self.limiter.config.borrowing_period])
        self.log.append(f"scheduled cancel #{rec.id} in {delay}")

        async def killer() -> None:
            await self.clock.sleep(delay)
            if rec.task is not None:
                rec.task.cancel()

        self.extra_tasks.append(asyncio.get_running_loop().create_task(killer()))

    def op_burst(self) -> None:
        for _ in range(self.rng.randint(3, 10)):
            if self.rng.random() < 0.7:
                self.op_spawn()
            else:
                self.op_manual_start()

    def op_close(self) -> None:
        if self.rng.random() < 0.1:
            self.log.append("close")
            self.limiter.close()

    def op_cancel(self) -> None:
        cands = [r for r in self.recs if r.task is not None and not r.task.done()]
        if not cands:
            return
        rec = self.rng.choice(cands)
        self.log.append(f"cancel #{rec.id} (phase {rec.phase})")
        assert rec.task is not None
        rec.task.cancel()

    def op_finish_body(self) -> None:
        cands = [r for r in self.recs if r.event is not None and not r.event.is_set()]
        if not cands:
            return
        rec = self.rng.choice(cands)
        self.log.append(f"finish #{rec.id}")
        assert rec.event is not None
        rec.event.set()

    def op_reconfigure(self) -> None:
        if self.rng.random() < 0.2:
            bad = invalid(self.rng, self.spec)
            config = self.limiter.config
            before = self.limiter.statistics()
            try:
                self.limiter.reconfigure(bad)
            except ConfigError:
                pass
            else:
                raise AssertionError("an invalid configuration was accepted")
            assert self.limiter.config is config
            after = self.limiter.statistics()
            assert after == before, "an invalid configuration changed the statistics"
            self.log.append("reconfigure invalid")
            return
        self.spec = mutate(self.rng, self.spec)
        self.log.append(f"reconfigure {self.spec}")
        self.limiter.reconfigure(build(self.spec))

    def op_adjust(self) -> None:
        self.log.append("adjust_borrowing")
        self.limiter.adjust_borrowing()

    async def op_advance(self) -> None:
        dt = self.rng.choice(
            [0.0, 0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, self.limiter.config.borrowing_period]
        )
        self.log.append(f"advance {dt} (now {self.clock.now()})")
        await self.clock.advance(dt)

    # -- invariants -----------------------------------------------------------------------

    def check(self) -> None:
        assert not _violations, _violations
        limiter = self.limiter
        now = self.clock.now()
        stats = limiter.statistics()
        controller = limiter._core.controller
        requests = [r.request for r in self.recs if r.request is not None]
        for name, state in controller.levels.items():
            qs = state.queue_set
            st = stats.priority_levels[name]
            mine = [r for r in requests if r.level is state]
            exe = [r for r in mine if r.state is S.EXECUTING]
            wai = [r for r in mine if r.state is S.WAITING]
            lin = [r for r in mine if r.state is S.LINGERING]
            assert st.executing_requests == len(exe), (name, st.executing_requests, len(exe))
            assert st.waiting_requests == len(wai), (name, st.waiting_requests, len(wai))
            assert st.executing_seats == sum(r.max_seats for r in exe + lin), (
                name,
                st.executing_seats,
                [(r, r.max_seats) for r in exe + lin],
            )
            assert st.waiting_seats == sum(r.max_seats for r in wai), name
            assert st.current_limit >= 0
            # internal bookkeeping of the queue set
            busy_q = sum(1 for q in qs.queues if q.waiting or q.executing)
            assert qs.active_queues == busy_q, (name, qs.active_queues, busy_q)
            assert qs.queued_seats_in_use == sum(q.seats_in_use for q in qs.queues), name
            assert qs.requests_executing == sum(len(q.executing) for q in qs.queues) + len(
                qs.queueless_executing
            ), name
            assert all(q.index == i for i, q in enumerate(qs.queues)), name
            for q in qs.queues:
                assert q.seats_in_use == sum(
                    r.max_seats
                    for r in mine
                    if r.queue is q and r.state in (S.EXECUTING, S.LINGERING)
                ), (name, q)
                assert q.max_seats_sum == sum(r.max_seats for r in q.waiting)
                assert q.total_work_sum == sum(r.total_work for r in q.waiting)
                want = (q.next_dispatch_r + q.waiting[0].total_work) & MASK if q.waiting else None
                assert q.finish == want, (name, q)
            assert set(qs.lingering) == set(lin), name
            ran = [r for r in mine if r.state in (S.EXECUTING, S.LINGERING, S.DONE)]
            assert st.dispatched == len(ran), (name, st.dispatched, len(ran))
            for reason, n in st.rejected.items():
                if reason == "time-out":
                    got = sum(1 for r in mine if r.state is S.TIMED_OUT)
                else:
                    got = sum(
                        1 for r in mine if r.state is S.REJECTED and r.reject_reason == reason
                    )
                assert n == got, (name, reason, n, got)
            assert st.cancelled == sum(1 for r in mine if r.state is S.CANCELLED), name
            for r in lin:
                assert r.release_at > now - EPS, (
                    f"lingering past its release: {r!r} {r.release_at} < {now}"
                )
            # work conservation (head-of-line blocking allowed)
            if wai and not qs.is_exempt and qs.concurrency_limit > 0:
                heads = [q for q in qs.queues if q.waiting]
                best = min((q.next_dispatch_r + q.waiting[0].total_work) & MASK for q in heads)
                cands = [
                    q.waiting[0]
                    for q in heads
                    if (q.next_dispatch_r + q.waiting[0].total_work) & MASK == best
                ]

                def fits(w: int, qs: QueueSet = qs) -> bool:
                    limit = qs.concurrency_limit
                    if qs.seats_in_use >= limit:
                        return False  # no free seat (lingering seats count)
                    if w > limit:
                        return qs.requests_executing == 0
                    return qs.seats_in_use + w <= limit

                assert not all(fits(r.max_seats) for r in cands), (
                    f"work conservation: {name} waits {len(wai)} with seats "
                    f"{qs.seats_in_use}/{qs.concurrency_limit}, executing {qs.requests_executing}, "
                    f"heads {[(r.max_seats) for r in cands]}"
                )
        # while requests wait, a borrowing timer is pending for the next adjustment
        adjustments = limiter._core.adjustments
        if controller.waiting_requests and not adjustments.closed:
            timer: Any = adjustments.borrowing_timer  # a FakeClock timer: it has .cancelled
            assert timer is not None and not timer.cancelled, "requests wait, no borrowing timer"
            assert adjustments.borrowing_timer_due == adjustments.next_run, (
                adjustments.borrowing_timer_due,
                adjustments.next_run,
            )
            assert adjustments.next_run > now - EPS
        # the plan: nominal, lendable, borrowing limits as documented

        scl = limiter.config.server_concurrency_limit
        cfgs = {n: st.config for n, st in controller.levels.items()}
        share_sum = sum(c.nominal_concurrency_shares for c in cfgs.values())
        nominal_sum = 0
        for level_name, c in cfgs.items():
            st = stats.priority_levels[level_name]
            nominal = math.ceil(scl * c.nominal_concurrency_shares / share_sum) if share_sum else 0
            nominal_sum += nominal
            lendable = math.floor(nominal * c.lendable_percent / 100 + 0.5)
            blp = None if c.limited is None else c.limited.borrowing_limit_percent
            borrowing = scl if blp is None else math.floor(nominal * blp / 100 + 0.5)
            assert (st.nominal_limit, st.lendable_limit, st.borrowing_limit) == (
                nominal,
                lendable,
                borrowing,
            ), (level_name, st, nominal, lendable, borrowing)
            assert st.lower_limit == nominal - lendable and st.upper_limit == nominal + borrowing
        assert stats.nominal_limit_sum == nominal_sum
        # timers: one per waiting request, one per lingering request, at most one borrowing
        kinds: dict[str, int] = {}
        for _, _, t in self.clock._timers:
            if t.cancelled:
                continue
            cb = t.callback
            if cb == limiter._core._wait_limit_callback:
                kind = "wait"
                req = t.args[0]
                assert req.state in (S.WAITING, S.EXECUTING, S.LINGERING, S.DONE), (
                    "wait timer of",
                    req,
                )
            elif cb == limiter._core.adjustments._release:
                kind = "release"
                assert t.args[0].state is S.LINGERING, ("release timer of", t.args[0])
            elif cb == limiter._core.adjustments._on_borrowing_timer:
                kind = (
                    "borrowing"
                    if t.args[0] == limiter._core.adjustments.borrowing_timer_arming
                    else "stale"
                )
            else:
                kind = "other"
            kinds[kind] = kinds.get(kind, 0) + 1
        all_requests = [r for r in requests]
        n_wait = sum(1 for r in all_requests if r.state is S.WAITING)
        n_ling = sum(1 for r in all_requests if r.state is S.LINGERING)
        assert kinds.get("release", 0) == n_ling, (kinds, n_ling)
        assert kinds.get("wait", 0) >= n_wait, (kinds, n_wait)
        assert kinds.get("borrowing", 0) <= 1 and kinds.get("stale", 0) == 0, kinds
        # limits within their bounds
        if not stats.borrowing_error:
            for name, st in stats.priority_levels.items():
                if st.type == "Limited":
                    assert st.lower_limit <= st.current_limit <= st.upper_limit, (name, st)
        # requests of dropped levels: only lingering allowed
        live_levels = set(map(id, controller.levels.values()))
        for r in requests:
            if id(r.level) not in live_levels:
                assert r.state not in (S.WAITING, S.EXECUTING), f"request of a dropped level: {r!r}"
        # per-record consistency
        for rec in self.recs:
            req = rec.request
            assert len(rec.outcomes) <= 1 or (
                rec.manual and rec.outcomes[0] == "admitted" and len(rec.outcomes) == 1
            ), (rec.id, rec.outcomes)
            assert rec.entered <= 1, rec
            if req is None:
                continue
            if req.state is S.WAITING:
                assert req.arrival_time + rec.wl_eff > now - EPS, (
                    f"#{rec.id} waits past its wait limit {rec.wl_eff}: arrived "
                    f"{req.arrival_time}, now {now}"
                )
            if (
                not rec.manual
                and rec.entered == 0
                and req.state is S.LINGERING
                and rec.task is not None
                and rec.task.done()
            ):
                # engine.md: cancelled at the moment it was given its seats, "the seats pass
                # on to the next request" -- not held for an additional latency of work that
                # never ran
                _violations.append(
                    f"#{rec.id} never ran but holds {req.max_seats} seats "
                    f"until {req.release_at} (additional latency)"
                )
            if rec.ext_released:
                continue
            if (
                self.settled
                and not limiter.closed
                and rec.phase == "waiting"
                and rec.task is not None
                and not rec.task.done()
            ):
                assert req.state is S.WAITING, (rec.id, req.state, rec.outcomes)
            if rec.phase in ("body", "exec") and not (rec.task and rec.task.cancelling()):
                assert req.state is S.EXECUTING, (rec.id, rec.phase, req.state)
        for fs_name, counters in controller.flow_schema_counters.items():
            fs = stats.flow_schemas[fs_name]
            ours = [r for r in requests if r.counters is counters]
            assert fs.executing_requests == sum(1 for r in ours if r.state is S.EXECUTING), fs
            assert fs.waiting_requests == sum(1 for r in ours if r.state is S.WAITING), fs
            assert fs.matched == len(ours), (fs, len(ours))
        # flow schemas: every matched request is accounted for
        for fs_name, fs in stats.flow_schemas.items():
            total = fs.dispatched + sum(fs.rejected.values()) + fs.cancelled + fs.waiting_requests
            assert fs.matched == total, (fs_name, fs)
            assert fs.executing_requests >= 0 and fs.waiting_requests >= 0, fs

    # -- driver ---------------------------------------------------------------------------

    async def run(self) -> None:
        ops = [
            (self.op_spawn, 6),
            (self.op_manual_start, 3),
            (self.op_manual_wait, 2),
            (self.op_manual_release, 2),
            (self.op_cancel, 1.5),
            (self.op_external_release, 0.5),
            (self.op_extra_wait, 0.5),
            (self.op_burst, 0.7),
            (self.op_scheduled_cancel, 1.0),
            (self.op_close, 0.1),
            (self.op_finish_body, 3),
            (self.op_reconfigure, 1),
            (self.op_adjust, 0.7),
            (self.op_advance, 5),
        ]
        funcs = [f for f, _ in ops]
        weights = [w for _, w in ops]
        for _ in range(self.steps):
            op = self.rng.choices(funcs, weights)[0]
            result = op()
            if asyncio.iscoroutine(result):
                await result
            self.settled = op == self.op_advance
            if self.rng.random() < 0.7:
                await self.clock.advance(0)
                self.settled = True
            self.check()
        await self.teardown()

    async def teardown(self) -> None:
        self.log.append("--- teardown")
        for rec in self.recs:
            if rec.event is not None:
                rec.event.set()
        for rec in self.recs:
            if rec.manual and rec.phase in ("queued", "exec", "cancelled-wait"):
                before = rec.request.state
                rec.adm.release()
                if rec.phase == "queued":
                    self.outcome(rec, f"released-{before.name.lower()}")
                rec.phase = "done"
        await self.clock.advance(0)
        # Waiting tasks dispatch or time out; manual ones in wait() are released by now.
        for _ in range(200):
            await self.clock.run_until_idle(limit=1000)
            pending = [r for r in self.recs if r.task is not None and not r.task.done()]
            if not pending:
                break
            for r in pending:
                if r.manual and r.phase == "exec":
                    r.adm.release()
                    r.phase = "done"
            await self.clock.advance(1)
        # manual waiters admitted during teardown, and any whose waiter task never ran
        for rec in self.recs:
            if rec.manual:
                rec.adm.release()
                rec.phase = "done"
        await self.clock.run_until_idle(limit=1000)
        self.settled = True
        await self.clock.advance(3 * self.limiter.config.borrowing_period + 5)
        self.check()
        assert not _violations, _violations
        assert all(t.done() for t in self.extra_tasks)
        self.limiter.run_due()  # the idle adjustments (statistics() is a pure read)
        stats = self.limiter.statistics()
        for name, st in stats.priority_levels.items():
            assert (
                st.executing_requests,
                st.executing_seats,
                st.waiting_requests,
                st.waiting_seats,
            ) == (0, 0, 0, 0), (name, st)
            assert not st.quiescing, f"quiescing level {name} was never dropped"
        for fs in stats.flow_schemas.values():
            assert fs.executing_requests == 0 and fs.waiting_requests == 0, fs
        assert self.clock.pending_timers == 0, self.clock._timers
        for rec in self.recs:
            assert rec.task is None or rec.task.done()
            if rec.request is None and rec.task is not None and rec.task.cancelled():
                continue  # cancelled before its first step: never started
            assert len(rec.outcomes) >= 1 or (rec.manual), (rec.id, rec.outcomes)
            if not rec.manual:
                assert len(rec.outcomes) == 1, (rec.id, rec.outcomes)
                if rec.ext_released and rec.outcomes[0] not in ("ran", "ran-cancelled"):
                    assert rec.outcomes[0] in (("rejected", "time-out"), "cancelled") or (
                        rec.outcomes[0][0] == "runtime"
                    ), rec.outcomes
            if rec.request is not None:
                assert rec.request.state in (S.DONE, S.REJECTED, S.TIMED_OUT, S.CANCELLED), (
                    rec.id,
                    rec.request,
                )
        c = self.observer.counts
        arrived = c.get("arrived", 0)
        assert arrived == sum(1 for r in self.recs if r.request is not None), (c, len(self.recs))
        assert c.get("dispatched", 0) == c.get("finished", 0), c
        assert arrived == c.get("dispatched", 0) + c.get("rejected", 0) + c.get("cancelled", 0), c
        # a fresh request is admitted at once on every configured level that can have seats
        for name in stats.priority_levels:
            st = self.limiter.statistics().priority_levels[name]  # a D5 adjustment moves limits
            if name == "catch-all" or st.upper_limit == 0:
                continue
            if st.limit_response == "Reject" and st.current_limit == 0:
                continue  # documented: a Reject level at limit 0 cannot see demand
            if st.nominal_limit == 0:
                continue
            group = {"exempt": "system:masters"}.get(name, f"g-{name}")
            routes = self.spec["routes"]
            if name != "exempt" and routes.get(group) != name:
                continue
            adm = self.limiter.admit(
                RequestDigest(user="fresh", groups=(group, "system:authenticated"))
            )
            assert adm.start(), f"a fresh request waits at idle level {name}: {st}"
            assert adm.priority_level == name
            adm.release()


def run_seed(seed: int, steps: int = 120) -> Fuzzer:
    fuzzer = Fuzzer(seed, steps)

    async def main() -> None:
        await fuzzer.run()

    asyncio.run(main())
    return fuzzer


SEEDS = int(os.environ.get("APF_FUZZ_SEEDS", "30"))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_limiter_fuzz(seed: int) -> None:
    run_seed(seed)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=hst.integers(0, 2**32 - 1), steps=hst.integers(20, 200))
def test_limiter_fuzz_hypothesis(seed: int, steps: int) -> None:
    _violations.clear()
    run_seed(seed, steps)
