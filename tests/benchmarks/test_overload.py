"""The overload benchmark really overloads: rejections, retries after Retry-After, counted costs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks import overload

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("kind", ["bare", "admitted", "rejected"])
def test_the_counted_requests_are_what_they_say(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # _count raises unless every request got the status of its kind: 429 for "rejected" (the
    # seats held and the flood's queues full), 200 otherwise.
    for name in [*overload.APF_ENV, "APF_BENCH_WAIT_LIMIT"]:
        monkeypatch.setenv(name, overload.APF_ENV.get(name, ""))
    asyncio.run(overload._count(kind, 30))


def test_a_quick_run_rejects_retries_and_plots(tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    out = tmp_path / "overload.json"
    argv = ["--quick", "--multiples", "1,5", "--contenders", "limit-concurrency,apf-retry"]
    result = overload.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text())["runs"] == result["runs"]
    runs = {(run["contender"], run["multiple"]): run for run in result["runs"]}
    assert set(runs) == {(c, m) for c in ("limit-concurrency", "apf-retry") for m in (1.0, 5.0)}
    for run in runs.values():
        # Every arrival ends in exactly one outcome, and the generator checks itself.
        assert sum(run["statuses"].values()) == run["arrivals"] > 0
        assert run["generator"]["scheduled_rate"] > 0
        assert run["generator"]["lateness_p99_ms"] >= 0
        assert 0 < run["goodput"] < 1.5
    five_times = runs["limit-concurrency", 5.0]
    assert five_times["statuses"].get("503", 0) > 0  # uvicorn's own rejections
    apf = runs["apf-retry", 5.0]
    assert apf["statuses"].get("429", 0) > 0
    assert apf["generator"]["sends_with_retries"] > apf["arrivals"]  # retried after Retry-After
    assert apf["cpu_per_rejection_us"] is not None
    assert apf["mice"] > 0
    # The server's own counts over the window: the pool worked, APF dispatched and timed out.
    assert apf["server"]["pool_served"] > 0 < apf["server"]["pool_busy"]
    assert apf["server"]["dispatched"] > 0
    assert apf["server"]["answered_after_deadline"] >= 0
    assert "dispatched" not in five_times["server"]  # no limiter, only the pool's counts

    pytest.importorskip("matplotlib")
    from benchmarks.plots import overload_goodput

    overload_goodput(result, tmp_path / "overload.png")
    assert (tmp_path / "overload.png").stat().st_size > 10_000


def test_clients_tell_what_is_left_of_their_timeout() -> None:
    async def requests() -> tuple[bytes, bytes]:
        told = overload.OpenLoop("127.0.0.1", 1, 200, 2.0, False, tell_deadline=True)
        silent = overload.OpenLoop("127.0.0.1", 1, 200, 2.0, False)
        deadline = asyncio.get_running_loop().time() + 1.5
        return told._request("flood", deadline), silent._request("flood", deadline)

    told, silent = asyncio.run(requests())
    header = overload.DEADLINE_HEADER.encode()
    value = told.split(header + b": ")[1].split(b"\r\n")[0]
    assert 1400 <= int(value) <= 1500  # what is left of the deadline, in milliseconds
    assert header not in silent
    assert b"x-bench-deadline: " in told and b"x-bench-deadline: " in silent


def test_the_deadline_contenders_read_the_header_the_clients_send() -> None:
    for name, (_, _, env, _, tell) in overload.CONTENDERS.items():
        reads = env.get("APF_BENCH_DEADLINE_HEADER")
        assert reads in (None, overload.DEADLINE_HEADER), name
        assert not reads or tell, name  # a server reading it has clients sending it
