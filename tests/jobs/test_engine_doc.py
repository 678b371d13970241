"""docs/engine.md's jobs quickstart runs as shown and prints what the page says it prints."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from apf_limiter import Limiter
from apf_limiter.jobs import Job

ENGINE_MD = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def _page() -> str:
    return ENGINE_MD.read_text(encoding="utf-8")


def test_the_quickstart_runs_and_prints_what_the_page_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = _page()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    promised = page.split("It prints\n\n```text\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"__name__": "jobs"}
    exec(compile(code, "docs/engine.md", "exec"), namespace)
    assert capsys.readouterr().out == promised
    # No level of the quickstart has a lower limit of 0 (what `apf-limiter show` notes).
    limiter = namespace["limiter"]
    assert isinstance(limiter, Limiter)
    levels = limiter.statistics().priority_levels
    assert all(levels[name].lower_limit > 0 for name in ("interactive", "batch"))


def test_the_page_gives_jobs_own_signature() -> None:
    # It once showed a `*` after `tenant` that Job does not have.
    parameters = ", ".join(
        name if parameter.default is inspect.Parameter.empty else f"{name}={parameter.default!r}"
        for name, parameter in inspect.signature(Job).parameters.items()
    ).replace("'", '"')
    assert f"`Job({parameters})`" in re.sub(r"\s+", " ", _page())
