"""The wiring snippets of README.md and docs/rolling-out.md run as printed, and do what they say.

Each snippet is run in a subprocess of its own (its ``logging.basicConfig`` must not touch this
process's logging), with only what the page leaves to the reader stubbed: an ``app`` with one
route and an ``is_admin`` check. Requests go through the app in memory (httpx's ASGITransport);
the script prints what a new user would look at: statuses, headers, the log on stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: What the pages leave to the reader: an application and an authorization check.
_STUBS = """\
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

async def _work(request):
    return PlainTextResponse("ok")

app = Starlette(routes=[Route("/work", _work)])

def is_admin(scope):
    return True
"""

#: Sends the requests and prints what came back, as JSON on stdout.
_DRIVER = """
import asyncio as _asyncio
import json as _json
import os as _os

import httpx as _httpx

async def _drive():
    transport = _httpx.ASGITransport(app=app)
    seen = {}
    async with _httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        work = await client.get("/work")
        seen["work"] = [work.status_code, dict(work.headers)]
        metrics = await client.get("/metrics")
        seen["metrics"] = [metrics.status_code, metrics.text]
        board = await client.get("/debug/api_priority_and_fairness/dashboard")
        seen["dashboard"] = board.status_code
        if _os.environ.get("SWITCH_TO_ENFORCE"):
            # Step 4: the same file with its enforcement line changed, replaced atomically.
            with open("apf.yaml.tmp", "w", encoding="utf-8") as tmp:
                tmp.write(_os.environ["SWITCH_TO_ENFORCE"])
            _os.replace("apf.yaml.tmp", "apf.yaml")
            seen["reloaded"] = limiter.reload()
            after = await client.get("/work")
            seen["after"] = [after.status_code, dict(after.headers)]
    print(_json.dumps(seen))

_asyncio.run(_drive())
"""


def _block(text: str, language: str, marker: str) -> str:
    """The one fenced ``language`` block of ``text`` that contains ``marker``."""
    found: list[str] = re.findall(rf"```{language}\n(.*?)```", text, re.S)
    blocks = [block for block in found if marker in block]
    assert len(blocks) == 1, f"one {language} block with {marker!r}"
    return blocks[0]


def _run(
    directory: Path, snippet: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    (directory / "snippet_app.py").write_text(_STUBS + snippet + _DRIVER, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "snippet_app.py"],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return seen, result.stderr


def test_the_readme_observability_snippet_runs_as_printed(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = _block(readme, "python", "PrometheusMetrics()")
    (tmp_path / "apf.yaml").write_text("serverConcurrencyLimit: 16\n", encoding="utf-8")
    seen, _ = _run(tmp_path, snippet)
    status, headers = seen["work"]
    assert status == 200
    assert headers["x-apf-priority-level"] == "workload-low"
    metrics_status, metrics = seen["metrics"]
    assert metrics_status == 200
    assert 'apf_flowcontrol_dispatched_requests_total{flow_schema="anonymous"' in metrics
    assert seen["dashboard"] == 200


def test_rolling_out_runs_as_printed_from_shadow_to_enforce(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "rolling-out.md").read_text(encoding="utf-8")
    start = _block(page, "yaml", "enforcement: Shadow\n")
    enforce = _block(page, "yaml", "enforcement: Enforce")
    (tmp_path / "apf.yaml").write_text(start, encoding="utf-8")
    snippet = _block(page, "python", "reload=True")
    seen, log = _run(tmp_path, snippet, env={"SWITCH_TO_ENFORCE": enforce})
    # Step 1: the shadow header, the metrics, the dashboard, and the mode in the log.
    status, headers = seen["work"]
    assert status == 200
    assert headers["x-apf-shadow"] == "wait=0"
    _, metrics = seen["metrics"]
    assert "apf_flowcontrol_shadow_rejected_requests_total{" in metrics
    assert seen["dashboard"] == 200
    assert "configuration applied: enforcement Shadow" in log
    # Step 4: the reload switches enforcement on, says so, and keeps the tuned server limit.
    assert seen["reloaded"] is True
    after_status, after = seen["after"]
    assert after_status == 200
    assert "x-apf-shadow" not in after
    assert "configuration changed: enforcement Shadow -> Enforce" in log
    applied = [line for line in log.splitlines() if "applied: enforcement Enforce" in line]
    assert len(applied) == 1
    assert "server concurrency limit 16," in applied[0]
