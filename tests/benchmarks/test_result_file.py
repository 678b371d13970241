"""Benchmark result files: a smoke test never overwrites a committed result."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.result_file import write_result


def test_a_smoke_run_without_its_own_out_writes_elsewhere(tmp_path: Path) -> None:
    committed = tmp_path / "results" / "engine.json"
    committed.parent.mkdir()
    committed.write_text('{"kept": true}\n')
    written = write_result({"n": 1}, committed, default=committed, quick=True)
    assert written != committed
    assert json.loads(committed.read_text()) == {"kept": True}
    assert json.loads(written.read_text()) == {"n": 1}


def test_a_full_run_or_an_explicit_out_writes_where_asked(tmp_path: Path) -> None:
    default = tmp_path / "results" / "engine.json"
    assert write_result({"n": 2}, default, default=default, quick=False) == default
    mine = tmp_path / "mine.json"
    assert write_result({"n": 3}, mine, default=default, quick=True) == mine
    assert json.loads(default.read_text()) == {"n": 2}
    assert json.loads(mine.read_text()) == {"n": 3}
