"""The peer benchmark drives every variant for real, and slowapi's limit is really checked."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks import peers
from benchmarks.peer_apps import slowapi_installed

pytestmark = pytest.mark.timeout(60)

needs_slowapi = pytest.mark.skipif(not slowapi_installed(), reason="slowapi is not installed")
VARIANTS = [
    pytest.param(name, marks=needs_slowapi) if name.startswith("slowapi") else name
    for name in peers.IN_PROCESS
]


def _statuses(variant: str, requests: int) -> dict[int, int]:
    async def main() -> dict[int, int]:
        driver = peers.InProcess(peers.IN_PROCESS[variant]())
        await driver.run(requests)
        assert driver.responses == requests
        return driver.statuses

    return asyncio.run(main())


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_in_process_variant_answers_every_request(variant: str) -> None:
    assert _statuses(variant, 20) == {200: 20}


@needs_slowapi
@pytest.mark.parametrize("variant", ["slowapi", "slowapi-asgi"])
def test_slowapi_checks_its_limit_on_every_request(
    variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The benchmark's limit is never reached; a small one shows the middleware is live.
    monkeypatch.setenv("APF_BENCH_SLOWAPI_LIMIT", "3/minute")
    assert _statuses(variant, 5) == {200: 3, 429: 2}


def test_a_short_run_reports_added_microseconds_and_throughput(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    argv = ["--rounds", "1", "--requests", "50", "--variants", "bare,semaphore,apf-compiled"]
    argv += ["--loopback-rounds", "1", "--duration", "0.3", "--warmup", "0.1"]
    argv += ["--connections", "4", "--generator", "python", "--compiled", str(tmp_path)]
    result = peers.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text())["notes"] == result["notes"]
    assert any("apf-compiled skipped" in note for note in result["notes"])  # no tree there
    inner = result["in_process"]["variants"]
    assert set(inner) == {"bare", "semaphore"}
    assert inner["bare"]["added_us"] == [0.0]
    assert inner["semaphore"]["us_stats"]["median"] > 0
    outer = result["loopback"]["variants"]
    assert set(outer) == {"bare", "semaphore"}
    assert outer["bare"]["ratio_to_bare"] == [1.0]
    assert outer["semaphore"]["failures"] == 0 and outer["semaphore"]["rps"][0] > 0
