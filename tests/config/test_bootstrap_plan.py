"""The kubectl-style bootstrap YAML gives exactly Kubernetes' worked numbers (apf_controller.go)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apf_limiter import load_config
from apf_limiter.engine._concurrency import plan_configuration

BOOTSTRAP = Path(__file__).parent.parent / "data" / "kubernetes-bootstrap.yaml"

# level: (nominal, lendable, min, max seats or 0) at each server limit
EXPECTED = {
    600: {
        "exempt": (0, 0, 0, 0),
        "catch-all": (13, 0, 13, 0),
        "system": (74, 24, 50, 12),
        "node-high": (98, 25, 73, 15),
        "leader-election": (25, 0, 25, 4),
        "workload-high": (98, 49, 49, 15),
        "workload-low": (245, 221, 24, 37),
        "global-default": (49, 25, 24, 8),
    },
    100: {
        "exempt": (0, 0, 0, 0),
        "catch-all": (3, 0, 3, 0),
        "system": (13, 4, 9, 2),
        "node-high": (17, 4, 13, 2),
        "leader-election": (5, 0, 5, 1),
        "workload-high": (17, 9, 8, 2),
        "workload-low": (41, 37, 4, 6),
        "global-default": (9, 5, 4, 1),
    },
}
NOMINAL_24 = {
    "catch-all": 1,
    "system": 3,
    "node-high": 4,
    "leader-election": 1,
    "workload-high": 4,
    "workload-low": 10,
    "global-default": 2,
}


@pytest.mark.parametrize("server_limit", [600, 100])
def test_bootstrap_yaml_numbers(server_limit: int) -> None:
    plan = plan_configuration(load_config(BOOTSTRAP), server_limit)
    got = {
        level.name: (level.nominal_limit, level.lendable_limit, level.lower_limit, level.max_seats)
        for level in plan.levels
    }
    assert got == EXPECTED[server_limit]
    assert plan.nominal_limit_sum == {600: 602, 100: 105}[server_limit]


def test_bootstrap_yaml_numbers_at_24() -> None:
    plan = plan_configuration(load_config(BOOTSTRAP), 24)
    assert plan.nominal_limit_sum == 25
    nominal = {level.name: level.nominal_limit for level in plan.levels if level.name != "exempt"}
    assert nominal == NOMINAL_24
    assert all(level.max_seats == 1 for level in plan.levels if level.limit_response == "Queue")


def test_bootstrap_yaml_at_3000() -> None:
    assert plan_configuration(load_config(BOOTSTRAP), 3000).nominal_limit_sum == 3003
