"""Enforcement settings, and settings alone keeping the built-in levels and schemas."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from apf_limiter import ConfigError, load_config
from apf_limiter._cli import main
from apf_limiter.config import default_configuration, dump_config
from tests.helpers import single_level_config


def _problems(source: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_config(source)
    return [str(problem) for problem in raised.value.problems]


def test_enforcement_defaults_to_enforce_and_can_be_shadow_per_level() -> None:
    config = load_config(single_level_config())
    assert config.enforcement == "Enforce" and config.enforcement_of("test") == "Enforce"
    shadow = load_config({**single_level_config(), "enforcement": "Shadow"})
    assert shadow.enforcement_of("test") == "Shadow"
    assert shadow.enforcement_of("catch-all") == "Shadow"
    mixed = load_config({**single_level_config(), "priorityLevelEnforcement": {"test": "Shadow"}})
    assert mixed.enforcement_of("test") == "Shadow"
    assert mixed.enforcement_of("catch-all") == "Enforce"
    assert mixed.priority_level_enforcement == (("test", "Shadow"),)
    # Both ways: everything in shadow but one level enforced.
    both = load_config(
        {
            **single_level_config(),
            "enforcement": "Shadow",
            "priorityLevelEnforcement": {"catch-all": "Enforce"},
        }
    )
    assert both.enforcement_of("test") == "Shadow"
    assert both.enforcement_of("catch-all") == "Enforce"


def test_enforcement_round_trips_through_a_dump() -> None:
    config = load_config(
        {
            **single_level_config(),
            "enforcement": "Shadow",
            "priorityLevelEnforcement": {"test": "Enforce"},
        }
    )
    dumped = dump_config(config)
    assert dumped["enforcement"] == "Shadow"
    assert dumped["priorityLevelEnforcement"] == {"test": "Enforce"}
    assert load_config(dumped) == config
    assert "enforcement" not in dump_config(load_config(single_level_config()))


def test_bad_enforcement_values_are_reported() -> None:
    assert _problems({**single_level_config(), "enforcement": "DryRun"}) == [
        'enforcement: Unsupported value: "DryRun": supported values: "Enforce", "Shadow"'
    ]
    assert _problems(
        {
            **single_level_config(),
            "priorityLevelEnforcement": {"nope": "Shadow", "test": "shadow", "catch-all": 1},
        }
    ) == [
        'priorityLevelEnforcement.nope: Not found: "nope": no priority level of this name',
        'priorityLevelEnforcement.test: Unsupported value: "shadow": supported values: '
        '"Enforce", "Shadow"',
        "priorityLevelEnforcement.catch-all: Invalid value: 1: must be a string",
    ]


def test_settings_alone_keep_the_built_in_levels_and_schemas() -> None:
    # `serverConcurrencyLimit: 50` alone used to drop every level: all traffic went to
    # catch-all, with no queues and no fairness, and the probes were no longer exempt.
    config = load_config({"serverConcurrencyLimit": 50, "enforcement": "Shadow"})
    builtin = default_configuration()
    assert config == dataclasses.replace(builtin, server_concurrency_limit=50, enforcement="Shadow")
    assert [level.name for level in config.priority_levels] == [
        level.name for level in builtin.priority_levels
    ]
    shadow_one = load_config({"priorityLevelEnforcement": {"workload-low": "Shadow"}})
    assert shadow_one.enforcement_of("workload-low") == "Shadow"
    assert shadow_one.priority_levels == builtin.priority_levels


@pytest.mark.parametrize(
    "source",
    [
        {"serverConcurrencyLimit": 50, "priorityLevels": [], "flowSchemas": []},
        {"serverConcurrencyLimit": 50, "priorityLevels": []},
        {"serverConcurrencyLimit": 50, "flowSchemas": []},
        {},
    ],
)
def test_explicit_empty_lists_keep_meaning_no_levels(source: dict[str, Any]) -> None:
    config = load_config(source)
    assert [level.name for level in config.priority_levels] == ["exempt", "catch-all"]


def test_settings_beside_kubernetes_objects_do_not_bring_the_built_in_levels() -> None:
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "mine"},
        "spec": {
            "type": "Limited",
            "limited": {"nominalConcurrencyShares": 10, "limitResponse": {"type": "Reject"}},
        },
    }
    config = load_config([{"serverConcurrencyLimit": 50}, level])
    assert sorted(level.name for level in config.priority_levels) == ["catch-all", "exempt", "mine"]


@pytest.mark.parametrize("form", ["short", "kubernetes"])
def test_defaults_prints_the_built_in_configuration(
    capsys: pytest.CaptureFixture[str], form: str
) -> None:
    assert main(["defaults", "--form", form]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# The built-in web-app configuration")
    from apf_limiter.config import load_config_text

    assert load_config_text(text) == default_configuration()
    assert main(["defaults", "--json", "--form", form]) == 0
    assert load_config(json.loads(capsys.readouterr().out)) == default_configuration()
