"""Fixtures of the observability tests: a real Chromium for the dashboard test."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")


def _find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _skip(reason: str) -> None:
    print(f"\ndashboard browser test skipped: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's ``chromium``, installed with apt-get when missing (skips only if impossible)."""
    path = _find_chromium()
    if path:
        return path
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        _skip("chromium is not installed and installing it needs root (apt-get install chromium)")
    if shutil.which("apt-get") is None:
        _skip("chromium is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command, timeout in (
        (["apt-get", "update", "-qq"], 300),
        (["apt-get", "install", "-y", "-qq", "chromium"], 900),
    ):
        try:
            result = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _skip(f"{' '.join(command)} failed: {exc}")
        if result.returncode != 0:
            _skip(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")
    path = _find_chromium()
    if path is None:
        _skip("apt-get installed chromium but no chromium executable was found")
    assert path is not None
    return path
