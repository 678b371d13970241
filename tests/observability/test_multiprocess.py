"""Metrics across worker processes: ``PROMETHEUS_MULTIPROC_DIR`` and a real 2-worker server."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from apf_limiter import Limiter
from apf_limiter.observability import METRICS, PrometheusMetrics
from apf_limiter.observability._multiprocess import REFRESH_INTERVAL, NativeMetrics
from apf_limiter.observability._multiprocess_exposition import mark_dead_workers
from tests.observability.scenario import user
from tests.observability.test_metrics import P, Traffic

ROOT = Path(__file__).resolve().parents[2]
BATCH = 60
LEVEL = "workload-low"  # where the built-in configuration sends anonymous requests
NOMINAL = Limiter().statistics().priority_levels[LEVEL].nominal_limit  # one worker's


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """``uvicorn --workers 2`` serving ``multiprocess_app``, stopped with its workers after."""
    directory = tmp_path / "multiproc"
    directory.mkdir()
    port = _free_port()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    command = [
        sys.executable, "-m", "uvicorn", "tests.observability.multiprocess_app:app",
        "--workers", "2", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


# No keep-alive: every request opens a connection, which either worker may accept.
FRESH = httpx.Limits(max_keepalive_connections=0)


def _scrape(scraper: httpx.Client, base: str) -> tuple[str, str]:
    """One scrape on a fresh connection: (the answering worker's pid, the text)."""
    response = scraper.get(f"{base}/metrics")
    assert response.status_code == 200
    return response.headers["x-worker-pid"], response.text


def _wait_for_both_workers(scraper: httpx.Client, base: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            _, text = _scrape(scraper, base)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        # Each worker writes its gauges when it binds; liveall gauges carry its pid.
        if len({labels["pid"] for labels, _ in _samples(text, "apf_flowcontrol_current_r")}) == 2:
            return
        time.sleep(0.1)
    pytest.fail("the two workers did not both start within 15 s")


async def _load(base: str, count: int) -> set[str]:
    """``count`` requests, 12 at a time, each on a new connection; the pids that served them."""
    async with httpx.AsyncClient(base_url=base, limits=FRESH, timeout=5) as http:
        gate = asyncio.Semaphore(12)

        async def one() -> str:
            async with gate:
                response = await http.get("/work")
                assert response.status_code == 200
                return response.text

        return set(await asyncio.gather(*(one() for _ in range(count))))


def test_every_worker_reports_the_whole_process_group(server: str) -> None:
    with httpx.Client(limits=FRESH, timeout=5) as scraper:
        _wait_for_both_workers(scraper, server)
        served: set[str] = set()
        sent = 0
        while len(served) < 2 and sent < 10 * BATCH:  # until both workers have served some
            served |= asyncio.run(_load(server, BATCH))
            sent += BATCH
        assert len(served) == 2, "both workers should have served some of the load"
        _check_scrapes(scraper, server, sent)


def _check_scrapes(scraper: httpx.Client, server: str, sent: int) -> None:

    def dispatched(text: str) -> float:
        samples = _samples(text, "apf_flowcontrol_dispatched_requests_total")
        return sum(v for labels, v in samples if labels["priority_level"] == LEVEL)

    # A worker writes its counts at its next refresh (within REFRESH_INTERVAL); the one that
    # answers writes its own first.
    deadline = time.monotonic() + REFRESH_INTERVAL + 3
    while dispatched(_scrape(scraper, server)[1]) != sent:
        assert time.monotonic() < deadline, "the workers' counts never added up"
        time.sleep(0.1)
    answered: set[str] = set()
    # Until both workers have answered (bounded): which worker accepts a connection is the
    # kernel's and the scheduler's choice, and on a loaded machine one may take dozens in a row.
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        # Scrapes at once, each on its own connection: a worker busy with one leaves the next
        # connection to the other.
        for pid, text in asyncio.run(_scrape_at_once(server, 6)):
            answered.add(pid)
            assert dispatched(text) == sent
            seats = _samples(text, "apf_flowcontrol_work_estimated_seats_count")
            assert sum(v for labels, v in seats if labels["priority_level"] == LEVEL) == sent
            rejected = _samples(text, "apf_flowcontrol_rejected_requests_total")
            assert not [v for _, v in rejected if v]
            # livesum: the two workers' limits added up (both bound, both alive).
            nominal = _samples(text, "apf_flowcontrol_nominal_limit_seats")
            assert {labels["priority_level"]: v for labels, v in nominal}[LEVEL] == 2 * NOMINAL
            executing = _samples(text, "apf_flowcontrol_current_executing_requests")
            assert sum(v for labels, v in executing if labels["priority_level"] == LEVEL) == 0
        if len(answered) == 2:
            break
    assert len(answered) == 2, "scrapes on fresh connections should reach both workers"


async def _scrape_at_once(base: str, count: int) -> list[tuple[str, str]]:
    async with httpx.AsyncClient(base_url=base, limits=FRESH, timeout=5) as http:
        responses = await asyncio.gather(*(http.get("/metrics") for _ in range(count)))
    assert all(response.status_code == 200 for response in responses)
    return [(response.headers["x-worker-pid"], response.text) for response in responses]


def test_dead_workers_live_gauges_are_removed(tmp_path: Path) -> None:
    worker = subprocess.Popen([sys.executable, "-c", "pass"])
    worker.wait(timeout=5)  # a worker that has exited: its pid is free
    dead, alive = worker.pid, os.getpid()
    for pid in (dead, alive):
        for name in (f"gauge_livesum_{pid}.db", f"gauge_liveall_{pid}.db", f"counter_{pid}.db"):
            (tmp_path / name).write_bytes(b"")
    assert mark_dead_workers(str(tmp_path)) == [dead]
    # Its live gauges are forgotten; its counters stay in the sums.
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [
            f"counter_{dead}.db",
            f"counter_{alive}.db",
            f"gauge_liveall_{alive}.db",
            f"gauge_livesum_{alive}.db",
        ]
    )


def test_without_the_directory_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    metrics = PrometheusMetrics(CollectorRegistry())
    assert metrics._native is None
    assert "request_arrived" not in vars(metrics)  # the hook is the class's own


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _flatten(families: Iterable[Any], names: set[str]) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        if family.name in names
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def _compare(traffic: Traffic, native: NativeMetrics, sources: set[str], skip: set[str]) -> None:
    names = {P + spec.name.removesuffix("_total") for spec in METRICS if spec.source in sources}
    names -= {P + name for name in skip}
    one_process = _flatten(traffic.registry.collect(), names)
    native.refresh()
    files = _flatten((f for m in native.metrics.values() for f in m.collect()), names)
    assert files == one_process
    assert len(one_process) > 40


async def test_native_metrics_agree_with_the_single_process_export(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # In this process prometheus_client keeps values in memory (the directory was not set at
    # its import), but the events and refreshes are those of multiprocess mode.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    native_side = Traffic()
    native = native_side.metrics._native
    assert native is not None
    native.interval = 3600  # refreshed by the comparisons only: samples at the same instants
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    one_process = Traffic()
    for traffic in (native_side, one_process):
        await traffic.run_to_waiting()
    _compare(one_process, native, {"event", "scrape", "sampler"}, set())
    for traffic in (native_side, one_process):
        await traffic.run_to_end()
    # At the end nothing waits: next_s_bounds is gone from one process, kept as last seen
    # (as Kubernetes keeps it) in the files.
    moved_on = {"next_s_bounds", "next_discounted_s_bounds"}
    _compare(one_process, native, {"event", "scrape", "sampler"}, moved_on)


def _native(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Limiter, NativeMetrics]:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics = PrometheusMetrics(CollectorRegistry())
    native = metrics._native
    assert native is not None
    limiter = Limiter(observer=metrics)
    metrics.bind(limiter)
    return limiter, native


def _value(native: NativeMetrics, name: str) -> float:
    samples = _flatten(native.metrics[name].collect(), {P + name.removesuffix("_total")})
    return sum(v for (sample, _), v in samples.items() if not sample.endswith("_created"))


async def test_a_worker_refreshes_itself_while_requests_are_in_flight(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limiter, native = _native(monkeypatch, tmp_path)
    native.interval = 0.05
    release = asyncio.Event()

    async def hold() -> None:
        async with limiter.admit(user("alice")):
            await release.wait()

    task = asyncio.create_task(hold())
    await asyncio.sleep(0.2)  # several intervals, no scrape
    assert _value(native, "dispatched_requests_total") == 1
    assert _value(native, "current_executing_requests") == 1
    assert native.timer is not None  # still in flight: it goes on
    release.set()
    await task
    await asyncio.sleep(0.2)
    assert _value(native, "current_executing_requests") == 0
    assert native.timer is None  # idle: the next arrival starts it again


def test_a_timer_lost_with_its_event_loop_is_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limiter, native = _native(monkeypatch, tmp_path)

    async def one_request() -> None:
        async with limiter.admit(user("alice")):
            pass

    asyncio.run(one_request())  # the loop ends with the refresh timer pending
    assert native.timer is not None
    native.refresh()  # as a scrape does
    assert native.timer is None
    asyncio.run(one_request())
    assert native.timer is not None
    assert _value(native, "dispatched_requests_total") == 1  # the first, refreshed above


async def test_the_adaptive_limit_is_written_per_worker_once_it_is_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from apf_limiter.observability._adaptive_metrics import adaptive_samples
    from apf_limiter.testing import FakeClock
    from tests.observability.scenario import adaptive_config, wave

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics = PrometheusMetrics(CollectorRegistry())
    native = metrics._native
    assert native is not None
    clock = FakeClock()
    limiter = Limiter(adaptive_config(), clock=clock, observer=metrics)
    metrics.bind(limiter)
    await wave(limiter, clock, 30, 0.1)
    await clock.advance_to(0.95)
    await wave(limiter, clock, 30, 0.1)
    native.refresh()
    adaptive = limiter.adaptive_concurrency
    assert adaptive is not None and adaptive.updates >= 1
    for name, values in adaptive_samples(adaptive).items():
        assert _value(native, name) == pytest.approx(sum(values.values())), name
    assert _value(native, "adaptive_applied_limit_seats") == adaptive.applied_limit > 10


_PRELOAD = """
import os, sys
from prometheus_client import CollectorRegistry
from apf_limiter import Limiter
from apf_limiter.observability import PrometheusMetrics
from apf_limiter.observability._multiprocess import refresh_all

directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]

def live(pid):
    return sorted(f for f in os.listdir(directory) if f.startswith("gauge_live") and
                  f.endswith(f"_{pid}.db"))

# As gunicorn --preload's master: the app (limiter, metrics) is imported, then workers forked.
metrics = PrometheusMetrics(CollectorRegistry())
limiter = Limiter({"serverConcurrencyLimit": 10}, observer=metrics)
metrics.bind(limiter)
master = os.getpid()
assert live(master), "bind writes the master's gauges"
if sys.argv[1] == "served":
    refresh_all()  # as before answering a scrape: this process serves
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if live(os.getpid()) or sys.argv[1] == "served" else 3)
    children.append(pid)
codes = [os.waitpid(pid, 0)[1] for pid in children]
print(codes, bool(live(master)))
"""


@pytest.mark.parametrize(("kind", "kept"), [("preloaded", False), ("served", True)])
def test_a_preloading_master_does_not_count_as_a_worker(
    tmp_path: Path, kind: str, kept: bool
) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", _PRELOAD, kind],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # Both children exited 0 (each preloaded worker wrote its own gauges at once); the
    # preloading master's live gauges are gone, a process that served keeps its own.
    assert result.stdout.strip() == f"[0, 0] {kept}", result.stderr


async def test_the_files_hold_exactly_what_one_process_exports(tmp_path: Path) -> None:
    """The scripted traffic in a process in true multiprocess mode (file-backed values),
    scraped from its files as ``metrics_app`` does: every counter and histogram sample equals
    the one-process export of the same traffic, refreshed and scraped at the same instants."""
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    command = [sys.executable, "-m", "tests.observability.multiprocess_scrape"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=60, check=True)
    files = {family.name: family for family in text_string_to_metric_families(done.stdout.decode())}
    one_process = Traffic()
    await one_process.run_to_waiting()
    list(one_process.registry.collect())  # the instant the other process refreshed
    await one_process.run_to_end()
    kinds = {"counter", "histogram"}
    names = {
        P + spec.name.removesuffix("_total")
        for spec in METRICS
        if spec.kind in kinds and spec.source in {"event", "scrape", "sampler"}
    }
    expected = _flatten(one_process.registry.collect(), names)
    assert _flatten(files.values(), names) == expected
    histograms = [f for name, f in files.items() if name in names and f.type == "histogram"]
    assert len(histograms) >= 8
    assert sum(v for (name, _), v in expected.items() if name.endswith("_sum")) > 0
