"""Problems of configuration text that people hit first: tabs, and text with no document."""

from __future__ import annotations

from pathlib import Path

import pytest

from apf_limiter import ConfigError
from apf_limiter.config import load_config, load_config_text


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("serverConcurrencyLimit: 10\npriorityLevels:\n\t- name: x\n", "line 3, column 1"),
        (
            "priorityLevels:\n  - name: x\n    type: Exempt\n    exempt:\n"
            "\t  nominalConcurrencyShares: 1\n",
            "line 5, column 1",
        ),
    ],
)
def test_a_tab_in_the_indentation_is_named(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config_text(text)
    [problem] = raised.value.problems
    assert where in problem.message
    assert "a tab character: YAML indents with spaces only" in problem.message


def test_pyyaml_naming_the_tab_itself_is_not_repeated() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config_text("priorityLevels:\n  - name: x\n\ttype: Exempt\n")
    [problem] = raised.value.problems
    assert problem.message.count("tab") == 1


def test_other_yaml_errors_say_nothing_of_tabs() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config_text("priorityLevels: [\n")
    assert "tab" not in raised.value.problems[0].message


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n...\n", "null\n"])
def test_text_with_no_document_is_refused_as_a_file_is(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config_text(text)
    [problem] = raised.value.problems
    assert problem.message.startswith("the text holds no configuration")
    file = tmp_path / "apf.yaml"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError):
        load_config(file)


def test_the_empty_configuration_is_written_braces() -> None:
    assert load_config_text("{}") == load_config({})
    assert load_config_text("{}", format="json") == load_config({})
