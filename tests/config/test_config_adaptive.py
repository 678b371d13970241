"""``adaptiveConcurrency``: off unless given, its defaults, round trips and type problems."""

from __future__ import annotations

from typing import Any

import pytest

from apf_limiter import ConfigError, load_config
from apf_limiter.config import dump_config
from apf_limiter.config._model import AdaptiveConcurrency
from tests.helpers import single_level_config


def test_absent_means_off_and_nothing_else_changes() -> None:
    config = load_config(single_level_config(limit=7))
    assert config.adaptive_concurrency is None
    assert "adaptiveConcurrency" not in dump_config(config)


def test_an_empty_mapping_turns_it_on_with_the_defaults() -> None:
    config = load_config({**single_level_config(limit=7), "adaptiveConcurrency": {}})
    assert config.adaptive_concurrency == AdaptiveConcurrency()
    assert config.adaptive_concurrency.algorithm == "Gradient"
    assert config.adaptive_concurrency.start_limit(7) == 7


@pytest.mark.parametrize("form", ["short", "kubernetes"])
def test_every_field_round_trips_through_a_dump(form: str) -> None:
    adaptive: dict[str, Any] = {
        "minLimit": 4,
        "maxLimit": 90,
        "initialLimit": 30,
        "algorithm": "AIMD",
        "updateInterval": 0.5,
        "tolerance": 1.5,
        "smoothing": 0.5,
        "backoff": 0.8,
        "baselineWindow": 120.0,
    }
    config = load_config({**single_level_config(limit=7), "adaptiveConcurrency": adaptive})
    assert config.adaptive_concurrency == AdaptiveConcurrency(
        min_limit=4,
        max_limit=90,
        initial_limit=30,
        algorithm="AIMD",
        update_interval=0.5,
        tolerance=1.5,
        smoothing=0.5,
        backoff=0.8,
        baseline_window=120.0,
    )
    dumped = dump_config(config, form=form)
    assert dumped["adaptiveConcurrency"] == adaptive
    assert load_config(dumped) == config


def test_settings_alone_keep_the_builtin_levels_and_the_adaptive_limit() -> None:
    config = load_config({"serverConcurrencyLimit": 50, "adaptiveConcurrency": {"maxLimit": 80}})
    assert config.adaptive_concurrency == AdaptiveConcurrency(max_limit=80)
    assert len(config.priority_levels) > 2


def test_the_start_is_server_concurrency_limit_within_the_bounds() -> None:
    bounds = AdaptiveConcurrency(min_limit=5, max_limit=10)
    assert bounds.start_limit(2) == 5
    assert bounds.start_limit(600) == 10
    assert AdaptiveConcurrency(initial_limit=3).start_limit(600) == 3


def test_wrong_types_are_problems_with_their_paths() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(
            {
                **single_level_config(),
                "adaptiveConcurrency": {"minLimit": "two", "tolerance": True},
            }
        )
    messages = [str(problem) for problem in raised.value.problems]
    assert messages == [
        'adaptiveConcurrency.minLimit: Invalid value: "two": must be an integer',
        "adaptiveConcurrency.tolerance: Invalid value: true: must be a number",
    ]
    with pytest.raises(ConfigError, match="adaptiveConcurrency: Invalid value: 3: must be a"):
        load_config({**single_level_config(), "adaptiveConcurrency": 3})
