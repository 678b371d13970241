"""Borrowing through the public API, in fake time: regimes, TestBorrowing, startup allocation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.config._defaults import kubernetes_bootstrap_configuration
from apf_limiter.engine._borrowing import SeatDemandStats
from apf_limiter.engine._integrator import IntegratorResults
from apf_limiter.testing import FakeClock
from tests.engine.scenario import ExactIntegrator
from tests.helpers import limited_level as _level
from tests.helpers import subject_schema


class ClosedLoop:
    """Clients that re-issue a request as soon as the previous one returns."""

    def __init__(self, limiter: Limiter, clock: FakeClock, hold: float) -> None:
        self.limiter = limiter
        self.clock = clock
        self.hold = hold
        self.running = True
        self.executing: dict[str, ExactIntegrator] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, user: str, count: int) -> None:
        integrator = self.executing.setdefault(user, ExactIntegrator(self.clock.now_ns()))
        loop = asyncio.get_running_loop()
        for _ in range(count):
            self.tasks.append(loop.create_task(self._client(user, integrator)))

    async def _client(self, user: str, integrator: ExactIntegrator) -> None:
        digest = RequestDigest(user=user, groups=("system:authenticated",))
        while self.running:
            async with self.limiter.admit(digest):
                integrator.add(1, self.clock.now_ns())
                await self.clock.sleep(self.hold)
                integrator.add(-1, self.clock.now_ns())

    async def stop(self) -> None:
        self.running = False
        await self.clock.run_until_idle()
        await asyncio.gather(*self.tasks)


@pytest.mark.parametrize(
    ("pl0", "pl1"),
    [
        pytest.param((50, 67), (33, 50), id="lendable-limited"),
        pytest.param((50, 33), (67, 50), id="borrowing-limited"),
    ],
)
async def test_kubernetes_test_borrowing(pl0: tuple[int, int], pl1: tuple[int, int]) -> None:
    config = {
        "serverConcurrencyLimit": 24,
        "priorityLevels": [
            _level("test-pl0", 100, lendable=pl0[0], borrowing=pl0[1]),
            _level("test-pl1", 100, lendable=pl1[0], borrowing=pl1[1]),
        ],
        "flowSchemas": [
            subject_schema("test-fs0", "test-pl0", user="test-user0"),
            subject_schema("test-fs1", "test-pl1", user="test-user1"),
        ],
    }
    clock = FakeClock()
    limiter = Limiter(config, clock=clock, hash_seed=3)
    stats = limiter.statistics()
    assert stats.nominal_limit_sum == 25
    assert stats.priority_levels["test-pl0"].nominal_limit == 12
    assert stats.priority_levels["catch-all"].nominal_limit == 1
    loop = ClosedLoop(limiter, clock, hold=0.25)
    loop.start("test-user0", 24)
    loop.start("test-user1", 6)
    await clock.advance(10)  # warm-up
    for integrator in loop.executing.values():
        integrator.reset(clock.now_ns())
    await clock.advance(15)
    average0 = loop.executing["test-user0"].reset(clock.now_ns())
    average1 = loop.executing["test-user1"].reset(clock.now_ns())
    assert 15.5 <= average0 <= 16.1
    assert 5.5 <= average1 <= 6.1
    await loop.stop()
    stats = limiter.statistics()
    assert stats.executing_requests == 0 and stats.waiting_requests == 0
    assert stats.borrowing_regime == 3
    assert stats.priority_levels["test-pl0"].current_limit == 16


def test_startup_allocation_of_the_kubernetes_bootstrap_configuration() -> None:
    # Derived by hand (apf_controller.go updateBorrowingLocked, conc_alloc.go): with no demand
    # yet every limited level's target and lower bound is its MinCL (sum 258) and the upper
    # bounds are far away, so the solver gives MinCL × 602/258 to each and the exempt level
    # takes its high watermark, 0.
    limiter = Limiter(kubernetes_bootstrap_configuration(), clock=FakeClock())
    stats = limiter.statistics()
    assert stats.nominal_limit_sum == 602
    assert stats.borrowing_regime == 3
    assert stats.fair_fraction == pytest.approx(602 / 258)
    current = {name: level.current_limit for name, level in stats.priority_levels.items()}
    assert current == {
        "exempt": 0,
        "catch-all": 30,  # 13 × 2.333 = 30.33
        "system": 117,  # 50 × 2.333 = 116.67
        "node-high": 170,  # 73 × 2.333 = 170.33
        "leader-election": 58,  # 25 × 2.333 = 58.33
        "workload-high": 114,  # 49 × 2.333 = 114.33
        "workload-low": 56,  # 24 × 2.333 = 56
        "global-default": 56,
    }
    lower = {name: level.lower_limit for name, level in stats.priority_levels.items()}
    assert sum(lower.values()) == 258


class Holder:
    """Holds a number of admissions of one user open until released."""

    def __init__(self, limiter: Limiter, user: str, count: int, groups: tuple[str, ...]) -> None:
        self.release = asyncio.Event()
        digest = RequestDigest(user=user, groups=groups)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._hold(limiter, digest)) for _ in range(count)]

    async def _hold(self, limiter: Limiter, digest: RequestDigest) -> None:
        async with limiter.admit(digest, wait_limit=60):
            await self.release.wait()

    async def done(self) -> None:
        self.release.set()
        await asyncio.gather(*self.tasks)


def _regime_config(exempt_shares: int = 0) -> dict[str, Any]:
    # ServerCL 20: shares 5 (catch-all) + 10 (a) + 10 (b) [+ exempt] = 25 + exempt.
    return {
        "serverConcurrencyLimit": 20,
        "priorityLevels": [
            {
                "name": "exempt",
                "type": "Exempt",
                "exempt": {"nominalConcurrencyShares": exempt_shares},
            },
            _level("a", 10, lendable=50, queue_length_limit=50),
            _level("b", 10, lendable=50, queue_length_limit=50),
        ],
        "flowSchemas": [
            subject_schema("fs-a", "a", user="user-a"),
            subject_schema("fs-b", "b", user="user-b"),
            {
                "name": "admins",
                "priorityLevelConfiguration": {"name": "exempt"},
                "matchingPrecedence": 50,
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": "root"}}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        ],
    }


async def test_regime_3_solver_shares_by_smoothed_demand() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(), clock=clock)
    level_a = limiter.statistics().priority_levels["a"]
    # NominalCL = ceil(20 × 10/25) = 8, lendable 4, so MinCL 4; catch-all ceil(4) = 4.
    assert (level_a.nominal_limit, level_a.lower_limit) == (8, 4)
    a = Holder(limiter, "user-a", 14, ("g",))  # demand 14 on a
    b = Holder(limiter, "user-b", 2, ("g",))  # demand 2 on b
    await clock.advance(10)
    limiter.adjust_borrowing()
    stats = limiter.statistics()
    assert stats.borrowing_regime == 3
    la, lb = stats.priority_levels["a"], stats.priority_levels["b"]
    assert (la.demand_high_watermark, lb.demand_high_watermark) == (14, 2)
    assert la.demand_smoothed == pytest.approx(14.0)
    # Sum 20 = 4 (catch-all) + a + b; b keeps its lower limit 4, a gets the rest: 12.
    assert (la.current_limit, lb.current_limit) == (12, 4)
    assert la.executing_requests == 12 and la.waiting_requests == 2
    await a.done()
    await b.done()


async def test_regime_1_exempt_borrowing_leaves_only_lower_limits() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(exempt_shares=0), clock=clock)
    root = Holder(limiter, "root", 30, ("g",))  # exempt demand 30 > the whole server
    await clock.advance(1)
    limiter.adjust_borrowing()
    stats = limiter.statistics()
    assert stats.borrowing_regime == 1
    assert stats.fair_fraction == 0
    assert stats.priority_levels["exempt"].current_limit == 30
    assert stats.priority_levels["a"].current_limit == 4  # MinCL
    assert stats.priority_levels["b"].current_limit == 4
    assert stats.priority_levels["catch-all"].current_limit == 4
    await root.done()


async def test_regime_2_partial_share_of_borrowed_demand() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(), clock=clock)
    a = Holder(limiter, "user-a", 8, ("g",))  # a at its nominal limit: minCurrent 8
    root = Holder(limiter, "root", 6, ("g",))  # the exempt level takes 6 of 20
    await clock.advance(1)
    limiter.adjust_borrowing()
    stats = limiter.statistics()
    # remaining = 20 - 6 = 14; minCLSum = 4 + 4 + 4 = 12; minCurrentSum = 4 + 8 + 4 = 16:
    # 12 < 14 <= 16 is regime 2 with shareFrac (14 - 12) / (16 - 12) = 0.5.
    assert stats.borrowing_regime == 2
    assert stats.fair_fraction == 0
    assert stats.priority_levels["a"].current_limit == 4 + 2  # MinCL + round(4 × 0.5)
    assert stats.priority_levels["b"].current_limit == 4
    assert stats.priority_levels["exempt"].current_limit == 6
    await a.done()
    await root.done()


async def test_periodic_adjustment_runs_on_schedule_and_after_idle() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(), clock=clock)
    assert limiter.statistics().adjustments == 1  # the one after configuration
    a = Holder(limiter, "user-a", 14, ("g",))
    await clock.advance(10)
    # Requests wait, so a timer ran the adjustment at t = 10 and raised a's limit at once.
    stats = limiter.statistics()
    assert stats.adjustments == 2
    assert stats.priority_levels["a"].current_limit == 12  # up from 8
    assert stats.priority_levels["a"].executing_requests == 12
    await a.done()
    # Idle: no timer; the adjustments that fell due are replayed on the next call.
    await clock.advance(100)
    assert clock.pending_timers == 0
    limiter.run_due()
    stats = limiter.statistics()
    assert stats.adjustments == 12
    # The smoothed demand decays with A = 0.977 per period while the demand is 0.
    smoothed = stats.priority_levels["a"].demand_smoothed
    assert 0 < smoothed < 14 * 0.977**9


async def test_raised_limit_dispatches_waiting_requests_at_once() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(), clock=clock)
    a = Holder(limiter, "user-a", 12, ("g",))
    await clock.advance(0)
    before = limiter.statistics().priority_levels["a"]
    assert before.waiting_requests > 0
    await clock.advance(1)  # one second of demand 12 makes the smoothed demand 12
    limiter.adjust_borrowing()  # the raise takes effect immediately
    await clock.advance(0)
    after = limiter.statistics().priority_levels["a"]
    assert after.current_limit >= 12
    assert after.waiting_requests == 0 and after.executing_requests == 12
    await a.done()


def test_solver_error_keeps_the_previous_limits() -> None:
    # Exempt shares count in the nominal sum, but no limited level may borrow: the upper
    # bounds cannot reach the required sum, the solver errs, and the limits stay (backstop).
    # (The mandatory catch-all can always borrow, so this needs a hand-built configuration.)
    from apf_limiter.config._model import (
        Configuration,
        ExemptPriorityLevelConfiguration,
        LimitedPriorityLevelConfiguration,
        PriorityLevel,
    )

    def limited(name: str) -> PriorityLevel:
        spec = LimitedPriorityLevelConfiguration(
            nominal_concurrency_shares=10, lendable_percent=50, borrowing_limit_percent=0
        )
        return PriorityLevel(name, "Limited", limited=spec)

    exempt = PriorityLevel("exempt", "Exempt", exempt=ExemptPriorityLevelConfiguration(10))
    config = Configuration(
        server_concurrency_limit=30, priority_levels=(exempt, limited("a"), limited("b"))
    )
    limiter = Limiter(config, clock=FakeClock())
    stats = limiter.statistics()
    # The initial limits are the backstop values: nominal - lendable // 2 = 10 - 5 // 2 = 8.
    assert stats.priority_levels["a"].nominal_limit == 10
    assert stats.priority_levels["a"].current_limit == 8
    assert stats.borrowing_regime == 3 and stats.fair_fraction == 0
    limiter.adjust_borrowing()
    stats = limiter.statistics()
    assert stats.priority_levels["a"].current_limit == 8
    assert stats.priority_levels["b"].current_limit == 8
    assert stats.borrowing_error.startswith("upper bounds sum to 20")


async def test_lowered_limit_never_preempts_running_requests() -> None:
    clock = FakeClock()
    limiter = Limiter(_regime_config(), clock=clock)
    a = Holder(limiter, "user-a", 12, ("g",))
    await clock.advance(1)
    limiter.adjust_borrowing()
    await clock.advance(0)
    assert limiter.statistics().priority_levels["a"].executing_requests == 12
    # b's demand now pushes a's limit down; a's running requests carry on.
    b = Holder(limiter, "user-b", 12, ("g",))
    await clock.advance(30)
    limiter.adjust_borrowing()
    level_a = limiter.statistics().priority_levels["a"]
    assert level_a.current_limit < 12
    assert level_a.executing_requests == 12
    await a.done()
    await b.done()


def test_smoothing_uses_go_s_exact_one_minus_a() -> None:
    # Go's (1 - 0.977) is a compile-time constant, exactly 0.023; in Python floating point
    # 1 - 0.977 is 0.02300000000000002. From 43 and a period at 34: Go gives 42.79299999999999.
    stats = SeatDemandStats()
    stats.update(IntegratorResults(10.0, 43.0, 0.0, 43.0, 43.0))
    assert stats.smoothed == 43.0
    stats.update(IntegratorResults(10.0, 34.0, 0.0, 34.0, 34.0))
    assert stats.smoothed == 0.977 * 43.0 + 0.023 * 34.0 == 42.79299999999999
