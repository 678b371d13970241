"""Hostile and extreme configurations: a ConfigError, never another exception (found by fuzzing)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter._errors import ConfigError
from apf_limiter.config._sources import load_config, load_config_text
from apf_limiter.testing import FakeClock


def _problems(source: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        load_config(source)
    return [str(problem) for problem in raised.value.problems]


@pytest.mark.parametrize(
    "text",
    [
        "serverConcurrencyLimit: !!bool x",
        "serverConcurrencyLimit: !!timestamp x",
        "serverConcurrencyLimit: !!int ''",
        "serverConcurrencyLimit: !!float ''",
        "flowSchemas: !!map [1]",
        "flowSchemas: !!set [1]",
    ],
)
def test_yaml_tags_the_constructor_chokes_on_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config_text(text)


def test_an_alias_bomb_gives_a_short_message_quickly() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for previous, name in zip("abcdefg", "bcdefgh", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    lines.append("serverConcurrencyLimit: *h")  # 10**8 strings once expanded
    with pytest.raises(ConfigError) as raised:
        load_config_text("\n".join(lines))
    (problem,) = [p for p in raised.value.problems if p.path == "serverConcurrencyLimit"]
    assert len(str(problem)) < 2000 and str(problem).endswith("...: must be an integer")


@pytest.mark.parametrize("depth", [200, 995])
def test_deep_nesting_in_a_value_is_reported_not_raised(depth: int) -> None:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    messages = _problems({"serverConcurrencyLimit": value})
    assert messages and "serverConcurrencyLimit" in messages[0]


@pytest.mark.parametrize(
    "config",
    [
        {"priorityLevels": [{"name": 10**5000}]},
        {"serverConcurrencyLimit": -(10**5000)},
        {"requestWaitLimit": 10**400},
        {"borrowingPeriod": -(10**5000)},
    ],
    ids=["name", "limit", "wait-limit", "period"],
)
def test_huge_integers_are_reported_not_raised(config: dict[str, Any]) -> None:
    assert _problems(config)


def test_a_server_concurrency_limit_too_large_to_plan_with_is_refused() -> None:
    messages = _problems({"serverConcurrencyLimit": 10**400})
    assert any(m.startswith("serverConcurrencyLimit: Invalid value") for m in messages)
    # The largest accepted value plans fine.
    Limiter(load_config({"serverConcurrencyLimit": 2**31 - 1}), clock=FakeClock())


@pytest.mark.parametrize("period", [1e-310, 5e-324, 1e-9, 0.0001])
def test_a_borrowing_period_too_short_to_run_is_refused(period: float) -> None:
    messages = _problems({"borrowingPeriod": period})
    assert any(m.startswith("borrowingPeriod: Invalid value") for m in messages)


async def test_the_shortest_borrowing_period_runs() -> None:
    clock = FakeClock()
    limiter = Limiter({"borrowingPeriod": 0.001}, clock=clock)
    await clock.advance(5)
    async with limiter.admit(RequestDigest()):
        await asyncio.sleep(0)


def test_a_file_name_with_a_nul_byte_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_config(str(tmp_path / "conf\x00.yaml"))


def test_values_the_message_cannot_sort_or_that_are_long_lists_stay_short() -> None:
    # Keys of mixed types cannot be sorted for JSON: a bounded repr, never the whole value.
    lines = ["s: &s {1: x, b: [x, x, x, x, x, x, x, x, x, x]}"]
    for previous, name in zip("stuvw", "tuvwx", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    lines.append("serverConcurrencyLimit: *x")
    with pytest.raises(ConfigError) as raised:
        load_config_text("\n".join(lines))
    (problem,) = [p for p in raised.value.problems if p.path == "serverConcurrencyLimit"]
    assert len(str(problem)) < 2000
    # A long list of strings is cut as it is joined.
    strings = "s: &s [" + ", ".join(["x" * 100] * 2000) + "]"
    with pytest.raises(ConfigError) as raised:
        load_config_text(strings + "\nserverConcurrencyLimit: *s")
    (problem,) = [p for p in raised.value.problems if p.path == "serverConcurrencyLimit"]
    assert len(str(problem)) < 2000


@pytest.mark.parametrize(
    "source", [{10**5000: 1}, "? 0x" + "f" * 5000 + "\n: 1\n"], ids=["dict", "yaml"]
)
def test_an_unknown_key_too_long_to_print_is_reported(source: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(source) if isinstance(source, dict) else load_config_text(source)
    assert any("Unknown field" in str(problem) for problem in raised.value.problems)


def test_the_cli_refuses_a_limit_override_beyond_32_bits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from apf_limiter._cli import main

    assert main(["show", "-c", str(10**400)]) == 2  # was an OverflowError traceback
    assert "32-bit" in capsys.readouterr().err
