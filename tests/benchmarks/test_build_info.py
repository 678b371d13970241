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


def test_a_compiled_tree_names_the_revision_it_was_compiled_from(tmp_path: Path) -> None:
    # build/ is not in git: asking git there would name whatever the checkout is at now.
    (tmp_path / "apf_limiter").mkdir()
    (tmp_path / "SOURCE_REVISION").write_text("0123456789abcdef0123456789abcdef01234567 dirty\n")
    assert source_revision(tmp_path / "apf_limiter") == {
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "dirty": True,
    }
