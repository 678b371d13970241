"""Smoke tests of examples/: each runs under uvicorn and does what its docstring says."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from apf_limiter import Limiter
from apf_limiter.jobs import Job
from tests.asgi.apps import limiter_of
from tests.asgi.server import serve

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"apf_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["starlette_app", "fastapi_app"])
def test_example_starts_with_the_uvicorn_command(name: str) -> None:
    command = [sys.executable, "-m", "uvicorn", f"examples.{name}:app", "--port", "0"]
    server = subprocess.Popen(
        command, cwd=EXAMPLES.parent, stderr=subprocess.PIPE, text=True, stdout=subprocess.DEVNULL
    )
    try:
        assert server.stderr is not None
        url = None
        for line in server.stderr:
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url is not None, "uvicorn did not start"
        response = httpx.get(f"{url}/healthz", timeout=5)
        assert response.status_code == 200
        assert response.headers["x-apf-priority-level"] == "exempt"
    finally:
        server.terminate()
        server.wait(10)


async def test_starlette_example_uses_the_default_configuration() -> None:
    app: Any = _load("starlette_app").app
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        home = await client.get("/")
        assert home.json()["flow_schema"] == "anonymous"
        assert home.headers["x-apf-priority-level"] == "workload-low"
        assert (await client.get("/slow", params={"seconds": 0.01})).json() == {"slept": 0.01}
        assert (await client.get("/slow", params={"seconds": "abc"})).status_code == 400
        limiter = limiter_of(app)
    assert limiter.statistics().executing_requests == 0


async def test_fastapi_example_per_user_fairness_heavy_route_and_sse() -> None:
    app: Any = _load("fastapi_app").app
    async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
        alice = await client.get("/reports", headers={"authorization": "Bearer alice-token"})
        assert alice.json() | {"queue_wait": 0} == {
            "user": "alice",
            "flow_schema": "users",
            "priority_level": "users",
            "seats": 1,
            "queue_wait": 0,
        }
        export = await client.get("/reports/export", headers={"authorization": "Bearer bob-token"})
        assert (export.json()["user"], export.json()["seats"]) == ("bob", 4)
        anonymous = await client.get("/reports")
        assert anonymous.json()["flow_schema"] == "anonymous"
        events = await client.get(
            "/events",
            params={"count": 2, "interval": 0.01},
            headers={"authorization": "Bearer bob-token"},
        )
        assert events.headers["content-type"].startswith("text/event-stream")
        assert events.text == "id: 1\ndata: tick 1\n\nid: 2\ndata: tick 2\n\n"
        limiter = limiter_of(app)
    stats = limiter.statistics()
    assert (stats.executing_requests, stats.executing_seats) == (0, 0)
    assert stats.priority_levels["users"].dispatched == 3


def test_worker_pool_example_keeps_interactive_jobs_flowing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _load("worker_pool").main(["--seconds", "0.5"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == {"etl", "alice", "bob"}
    for tenant in ("alice", "bob"):
        done, rejected = int(rows[tenant][2]), int(rows[tenant][3])
        assert done > 0 and rejected == 0
    # The batch backlog (40 jobs a second) gets its share too, and is retried, not dropped.
    assert (int(rows["etl"][2]), int(rows["etl"][3])) == (20, 0)


async def test_worker_pool_example_counts_a_batch_jobs_retry_pauses_in_its_wait() -> None:
    # The table's batch waits are from submission to start, as the interactive ones are: the
    # last try's admission.queue_wait alone showed 0 for a job rejected and retried later.
    example = _load("worker_pool")
    limiter = Limiter(
        {
            "serverConcurrencyLimit": 1,
            "priorityLevels": [
                {"name": "one", "limited": {"nominalConcurrencyShares": 1, "lendablePercent": 0,
                 "limitResponse": {"type": "Reject"}}},
            ],
            "flowSchemas": [
                {"name": "all", "priorityLevelConfiguration": {"name": "one"},
                 "jobs": {"kinds": ["*"]}},
            ],
        }
    )  # fmt: skip
    tally = example.Tally()
    loop = asyncio.get_running_loop()
    async with limiter.admit(Job("other").digest):  # the only seat: the export is rejected
        started = loop.time()
        job = asyncio.create_task(example.export(limiter, "etl", tally))
        await asyncio.sleep(0.05)
    await job
    assert tally.done == 1 and len(tally.waits) == 1
    pause = loop.time() - started - 0.1  # the job itself slept 0.1 s
    assert tally.waits[0] >= 0.5 and tally.waits[0] == pytest.approx(pause, abs=0.1)
    limiter.close()


async def test_metrics_apart_example_guards_metrics_and_serves_them_on_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("prometheus_client")
    monkeypatch.setenv("APF_METRICS_TOKEN", "s3cret")
    monkeypatch.setenv("APF_METRICS_PORT", "0")
    module = _load("metrics_apart")
    async with serve(module.app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        assert (await client.get("/")).text == "hello"
        assert (await client.get("/metrics")).status_code == 403
        wrong = await client.get("/metrics", headers={"authorization": "Bearer s3cre"})
        assert wrong.status_code == 403
        right = await client.get("/metrics", headers={"authorization": "Bearer s3cret"})
        assert right.status_code == 200
        assert "apf_flowcontrol_dispatched_requests_total{" in right.text
        host, port = module.metrics_server_address
        assert host == "127.0.0.1"
        apart = await client.get(f"http://{host}:{port}/metrics")
        assert apart.status_code == 200
        assert "apf_flowcontrol_current_limit_seats{" in apart.text
        monkeypatch.delenv("APF_METRICS_TOKEN")  # no token configured: the app's route is shut
        shut = await client.get("/metrics", headers={"authorization": "Bearer s3cret"})
        assert shut.status_code == 403
    assert module.metrics_server_address is None  # stopped with the app
