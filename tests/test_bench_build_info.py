"""Benchmark results name the build and the source revision they measured."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.bench_app import build_info, source_revision


def test_build_info_names_the_commit_of_the_measured_sources() -> None:
    info = build_info()
    package = Path(info["queueset_file"]).parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(package), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the sources are not in a git checkout here")
    assert re.fullmatch(r"[0-9a-f]{40}", info["commit"])
    assert info["commit"] == head
    assert isinstance(info["dirty"], bool)


def test_sources_outside_git_have_no_commit(tmp_path: Path) -> None:
    assert source_revision(tmp_path) == {"commit": None, "dirty": None}
