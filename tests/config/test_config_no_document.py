"""A file that holds no document is refused; an explicitly empty configuration is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from apf_limiter import ConfigError, Limiter
from apf_limiter.config._sources import load_config, load_file_content
from apf_limiter.config._text import NO_DOCUMENT

NO_DOCUMENT_FILES = [
    ("apf.yaml", ""),
    ("apf.yml", "\n \n"),
    ("apf.yaml", "# being written\n# serverConcurrencyLimit: 100\n"),
    ("apf.yaml", "---\n"),
    ("apf.yaml", "---\n# nothing\n...\n---\n"),
    ("apf.yaml", "~\n"),
    ("apf.json", ""),
    ("apf.json", "\r\n\t "),
    ("apf.json", "null"),
]


@pytest.mark.parametrize(("name", "content"), NO_DOCUMENT_FILES)
def test_a_file_with_no_document_is_a_config_error(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    for load in (load_config, Limiter, Limiter.from_file):
        with pytest.raises(ConfigError) as caught:
            load(path)
        assert [str(p) for p in caught.value.problems] == [f"{path}: {NO_DOCUMENT}"]


@pytest.mark.parametrize("content", ["{}", "--- {}\n", "# deliberately empty\n{}\n"])
def test_an_explicitly_empty_file_is_the_empty_configuration(tmp_path: Path, content: str) -> None:
    path = tmp_path / "apf.yaml"
    path.write_text(content, encoding="utf-8")
    assert load_config(path) == load_config({})
    assert [level.name for level in load_config(path).priority_levels] == ["exempt", "catch-all"]


def test_file_content_loads_as_the_file_does(tmp_path: Path) -> None:
    # What a reload parses (bytes read once) gives what loading the path gives, line endings
    # and problem positions included.
    text = "serverConcurrencyLimit: 7\r\npriorityLevels:\r\n- name: web\r\n  bogus: 1\r\n"
    path = tmp_path / "apf.yaml"
    path.write_bytes(text.encode())
    with pytest.raises(ConfigError) as from_path:
        load_config(path)
    with pytest.raises(ConfigError) as from_content:
        load_file_content(text.encode(), str(path))
    assert from_path.value.problems == from_content.value.problems
    good = b"serverConcurrencyLimit: 7\r\n"
    path.write_bytes(good)
    assert load_file_content(good, str(path)) == load_config(path)
    with pytest.raises(ConfigError) as caught:
        load_file_content(b"\xff\xfe", str(path))
    assert str(caught.value.problems[0]).startswith(f"{path}: cannot read the file: 'utf-8'")
