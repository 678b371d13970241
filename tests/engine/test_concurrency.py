"""The concurrency math vs upstream (apf_controller.go, max_seats_test.go, borrowing_test.go)."""

from __future__ import annotations

import dataclasses

import pytest

from apf_limiter.config._model import (
    Configuration,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    PriorityLevel,
)
from apf_limiter.engine._concurrency import (
    ConfigurationPlan,
    LevelPlan,
    borrowing_concurrency_limit,
    lendable_concurrency_limit,
    max_seats,
    nominal_concurrency_limit,
    plan_configuration,
    plan_levels,
)
from apf_limiter.engine._seat_seconds import go_round
from tests.engine.k8s_bootstrap_levels import (
    bootstrap_levels,
    catch_all_level,
    exempt_level,
    queuing_level,
)

QUEUING_LEVELS = (
    "system",
    "node-high",
    "leader-election",
    "workload-high",
    "workload-low",
    "global-default",
)

# -- go_round -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (24.5, 25),
        (220.5, 221),
        (-2.5, -3),
        (0.5, 1),
        (-0.5, -1),
        (2.5, 3),
        (2.4999999999999996, 2),
        (0.49999999999999994, 0),  # floor(x + 0.5) would give 1 here
        (-24.5, -25),
        (7.0, 7),
        (0.0, 0),
    ],
)
def test_go_round_half_away_from_zero(x: float, expected: int) -> None:
    result = go_round(x)
    assert result == expected
    assert isinstance(result, int)


# -- the scalar formulas --------------------------------------------------------------------------


def test_nominal_limit_multiplies_first() -> None:
    # 25 * 7 / 25 is exactly 7.0; 7 / 25 * 25 is 7.000000000000001 and would round up to 8.
    assert nominal_concurrency_limit(25, 7, 25) == 7
    assert nominal_concurrency_limit(600, 30, 245) == 74
    assert nominal_concurrency_limit(600, 0, 245) == 0
    assert nominal_concurrency_limit(600, 0, 0) == 0


def test_lendable_limit_multiplies_first_and_rounds_half_away() -> None:
    # 25 * 58 / 100 is exactly 14.5 -> 15; 25 * (58 / 100) is 14.499999999999998 -> 14.
    assert lendable_concurrency_limit(25, 58) == 15
    assert lendable_concurrency_limit(98, 25) == 25  # 24.5
    assert lendable_concurrency_limit(245, 90) == 221  # 220.5
    assert lendable_concurrency_limit(10, 0) == 0
    assert lendable_concurrency_limit(10, 100) == 10


def test_borrowing_limit() -> None:
    assert borrowing_concurrency_limit(12, None, 24) == 24
    assert borrowing_concurrency_limit(12, 67, 24) == 8  # 8.04
    assert borrowing_concurrency_limit(17, 50, 100) == 9  # 8.5
    assert borrowing_concurrency_limit(10, 250, 100) == 25  # may exceed 100 %
    assert borrowing_concurrency_limit(10, 0, 100) == 0


@pytest.mark.parametrize(
    ("nominal", "hand", "expected"),
    [(74, 6, 12), (25, 4, 4), (245, 6, 37), (5, 6, 1), (0, 6, 1), (100, 20, 5), (10, 1, 2)],
)
def test_max_seats_formula(nominal: int, hand: int, expected: int) -> None:
    assert max_seats(nominal, hand) == expected


# -- the worked tables (apf_controller.go) --------------------------------------------------------

# name: (nominal, lendable, lower, upper, initial, max_seats) at ServerCL 600
TABLE_600 = {
    "exempt": (0, 0, 0, 600, 0, 0),
    "catch-all": (13, 0, 13, 613, 13, 0),
    "system": (74, 24, 50, 674, 62, 12),
    "node-high": (98, 25, 73, 698, 86, 15),
    "leader-election": (25, 0, 25, 625, 25, 4),
    "workload-high": (98, 49, 49, 698, 74, 15),
    "workload-low": (245, 221, 24, 845, 135, 37),
    "global-default": (49, 25, 24, 649, 37, 8),
}


def _row(plan: LevelPlan) -> tuple[int, int, int, int, int, int]:
    return (
        plan.nominal_limit,
        plan.lendable_limit,
        plan.lower_limit,
        plan.upper_limit,
        plan.initial_limit,
        plan.max_seats,
    )


def test_bootstrap_plan_at_600() -> None:
    plan = plan_levels(bootstrap_levels(), 600)
    assert plan.server_concurrency_limit == 600
    assert plan.share_sum == 245
    assert plan.nominal_limit_sum == 602
    assert [level.name for level in plan.levels] == list(TABLE_600)
    assert {level.name: _row(level) for level in plan.levels} == TABLE_600
    # Nothing in the bootstrap set limits borrowing, so BorrowingCL is ServerCL everywhere.
    assert {level.borrowing_limit for level in plan.levels} == {600}


def test_bootstrap_plan_at_600_level_shapes() -> None:
    plan = plan_levels(bootstrap_levels(), 600)
    exempt = plan.level("exempt")
    assert (exempt.type, exempt.limit_response, exempt.is_exempt, exempt.is_queuing) == (
        "Exempt",
        "",
        True,
        False,
    )
    assert (exempt.queues, exempt.hand_size, exempt.queue_length_limit) == (0, 0, 0)
    assert exempt.borrowing_limit_percent is None
    catch_all = plan.level("catch-all")
    assert (catch_all.type, catch_all.limit_response, catch_all.is_queuing) == (
        "Limited",
        "Reject",
        False,
    )
    assert (catch_all.queues, catch_all.hand_size, catch_all.queue_length_limit) == (0, 0, 0)
    system = plan.level("system")
    assert (system.limit_response, system.is_queuing, system.is_exempt) == ("Queue", True, False)
    assert (system.queues, system.hand_size, system.queue_length_limit) == (64, 6, 50)
    assert (system.nominal_concurrency_shares, system.lendable_percent) == (30, 33)
    leader = plan.level("leader-election")
    assert (leader.queues, leader.hand_size, leader.queue_length_limit) == (16, 4, 50)
    assert plan.max_waiting_requests == 50 * (64 + 64 + 16 + 128 + 128 + 128)
    with pytest.raises(KeyError):
        plan.level("no-such-level")


def test_bootstrap_plan_at_100() -> None:
    plan = plan_levels(bootstrap_levels(), 100)
    assert plan.nominal_limit_sum == 105
    nominal_lendable_lower = {
        level.name: (level.nominal_limit, level.lendable_limit, level.lower_limit)
        for level in plan.levels
    }
    assert nominal_lendable_lower == {
        "exempt": (0, 0, 0),
        "catch-all": (3, 0, 3),
        "system": (13, 4, 9),
        "node-high": (17, 4, 13),
        "leader-election": (5, 0, 5),
        "workload-high": (17, 9, 8),  # 8.5 rounds away from zero
        "workload-low": (41, 37, 4),
        "global-default": (9, 5, 4),  # 4.5 rounds away from zero
    }
    assert [plan.level(name).max_seats for name in QUEUING_LEVELS] == [2, 2, 1, 2, 6, 1]
    assert all(level.upper_limit == level.nominal_limit + 100 for level in plan.levels)


def test_bootstrap_plan_at_24() -> None:
    plan = plan_levels(bootstrap_levels(), 24)
    assert plan.nominal_limit_sum == 25
    assert {level.name: level.nominal_limit for level in plan.levels} == {
        "exempt": 0,
        "catch-all": 1,
        "system": 3,
        "node-high": 4,
        "leader-election": 1,
        "workload-high": 4,
        "workload-low": 10,
        "global-default": 2,
    }
    assert [plan.level(name).max_seats for name in QUEUING_LEVELS] == [1] * 6


@pytest.mark.parametrize(
    ("server_cl", "nominal_sum"), [(600, 602), (100, 105), (24, 25), (3000, 3003)]
)
def test_bootstrap_nominal_limit_sum(server_cl: int, nominal_sum: int) -> None:
    plan = plan_levels(bootstrap_levels(), server_cl)
    assert plan.nominal_limit_sum == nominal_sum
    assert plan.nominal_limit_sum == sum(level.nominal_limit for level in plan.levels)


def test_plan_matches_config_defaults_bootstrap_configuration() -> None:
    from apf_limiter.config._defaults import kubernetes_bootstrap_configuration

    config = kubernetes_bootstrap_configuration()
    assert plan_configuration(config) == plan_levels(bootstrap_levels(), 600)


# -- maxSeats / max_seats_test.go -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("server_cl", "hand_size", "expected"),
    [
        (5, 6, 1),
        (10, 6, 1),
        (15, 6, 2),
        (20, 6, 3),
        (35, 6, 5),
        (100, 6, 15),
        (200, 6, 30),
        (10, 1, 2),
        (100, 20, 5),
    ],
)
def test_max_seats_vectors(server_cl: int, hand_size: int, expected: int) -> None:
    levels = (
        exempt_level(),
        catch_all_level(),
        queuing_level("test-pl", 10000, queues=128, hand_size=hand_size),
    )
    plan = plan_levels(levels, server_cl)
    level = plan.level("test-pl")
    assert level.nominal_limit == server_cl  # ceil(CL * 10000 / 10005)
    assert level.max_seats == expected
    assert plan.level("exempt").max_seats == 0
    assert plan.level("catch-all").max_seats == 0


# -- borrowing limits and jail levels (borrowing_test.go) -----------------------------------------


@pytest.mark.parametrize(
    ("pl0", "pl1", "expected"),
    [
        # (lendable %, borrowing %) per level -> (lendable, borrowing, lower, upper) per level
        ((50, 67), (33, 50), ((6, 8, 6, 20), (4, 6, 8, 18))),
        ((50, 33), (67, 50), ((6, 4, 6, 16), (8, 6, 4, 18))),
    ],
)
def test_borrowing_test_levels(
    pl0: tuple[int, int],
    pl1: tuple[int, int],
    expected: tuple[tuple[int, int, int, int], tuple[int, int, int, int]],
) -> None:
    levels = (
        exempt_level(),
        catch_all_level(),
        queuing_level("test-pl0", 100, pl0[0], 10, 2, 10, borrowing_limit_percent=pl0[1]),
        queuing_level("test-pl1", 100, pl1[0], 10, 2, 10, borrowing_limit_percent=pl1[1]),
    )
    plan = plan_levels(levels, 24)
    assert (plan.share_sum, plan.nominal_limit_sum) == (205, 25)
    assert plan.level("catch-all").nominal_limit == 1
    for name, row in zip(("test-pl0", "test-pl1"), expected, strict=True):
        level = plan.level(name)
        assert level.nominal_limit == 12
        assert level.borrowing_limit_percent is not None
        assert (
            level.lendable_limit,
            level.borrowing_limit,
            level.lower_limit,
            level.upper_limit,
        ) == row


def test_jail_level_with_zero_shares() -> None:
    levels = (
        *bootstrap_levels(),
        queuing_level("jail", 0, 50),
        queuing_level("tight-jail", 0, borrowing_limit_percent=50),
    )
    plan = plan_levels(levels, 600)
    assert plan.share_sum == 245  # zero shares leave everyone else's limits unchanged
    assert plan.nominal_limit_sum == 602
    jail = plan.level("jail")
    assert (jail.nominal_limit, jail.lendable_limit, jail.lower_limit) == (0, 0, 0)
    assert (jail.upper_limit, jail.initial_limit, jail.max_seats) == (600, 0, 1)
    tight = plan.level("tight-jail")
    assert (tight.borrowing_limit, tight.upper_limit) == (0, 0)


def test_exempt_shares_count_in_share_sum() -> None:
    levels = (exempt_level(shares=50, lendable_percent=20), *bootstrap_levels()[1:])
    plan = plan_levels(levels, 600)
    assert plan.share_sum == 295
    exempt = plan.level("exempt")
    # 600 * 50 / 295 = 101.69..; lendable 20.3 -> 20; exempt borrowing is always ServerCL.
    assert (exempt.nominal_limit, exempt.lendable_limit, exempt.borrowing_limit) == (102, 20, 600)
    assert (exempt.lower_limit, exempt.upper_limit, exempt.max_seats) == (82, 702, 0)
    assert plan.level("system").nominal_limit == 62  # ceil(61.02)


def test_only_zero_shares_gives_zero_limits() -> None:
    plan = plan_levels((exempt_level(), queuing_level("jail", 0)), 10)
    assert plan.share_sum == 0
    assert [level.nominal_limit for level in plan.levels] == [0, 0]
    assert plan.nominal_limit_sum == 0


# -- plan_configuration and misuse ----------------------------------------------------------------


def test_plan_configuration_uses_config_server_limit_unless_overridden() -> None:
    config = Configuration(server_concurrency_limit=100, priority_levels=bootstrap_levels())
    plan = plan_configuration(config)
    assert isinstance(plan, ConfigurationPlan)
    assert (plan.server_concurrency_limit, plan.nominal_limit_sum) == (100, 105)
    assert plan_configuration(config, 24).nominal_limit_sum == 25
    assert plan_configuration(config, 3000).nominal_limit_sum == 3003


def test_plans_are_frozen() -> None:
    plan = plan_levels(bootstrap_levels(), 600)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.levels[0].nominal_limit = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.share_sum = 1  # type: ignore[misc]


@pytest.mark.parametrize("server_cl", [0, -1])
def test_plan_rejects_non_positive_server_limit(server_cl: int) -> None:
    with pytest.raises(ValueError, match="server concurrency limit must be positive"):
        plan_levels(bootstrap_levels(), server_cl)


def test_plan_rejects_duplicate_names() -> None:
    with pytest.raises(ValueError, match="unique: system"):
        plan_levels((*bootstrap_levels(), queuing_level("system", 1)), 600)


def test_plan_rejects_limited_level_without_limited_part() -> None:
    broken = PriorityLevel(name="broken", type="Limited")
    with pytest.raises(ValueError, match="'broken'"):
        plan_levels((exempt_level(), broken), 600)
    no_queuing = PriorityLevel(
        name="no-queuing",
        limited=LimitedPriorityLevelConfiguration(
            limit_response=LimitResponse(type="Queue", queuing=None)
        ),
    )
    with pytest.raises(ValueError, match="'no-queuing'"):
        plan_levels((exempt_level(), no_queuing), 600)
