"""The hot-path profiler attributes time and calls to the right packages."""

from __future__ import annotations

import cProfile
import pstats

import pytest

import apf_limiter.engine._queueset
from benchmarks.profile_hot_paths import (
    PATHS,
    calls_per_request,
    main,
    package_of,
    self_time_shares,
)


def test_package_of_sorts_files_by_package() -> None:
    assert package_of("/x/site-packages/apf_limiter/engine/queueset.py") == "apf_limiter"
    assert package_of("/x/site-packages/h11/_connection.py") == "h11"
    assert package_of("/usr/lib/python3.11/asyncio/events.py") == "asyncio"
    assert package_of("C:\\py\\starlette\\routing.py") == "starlette"
    assert package_of("/usr/lib/python3.11/enum.py") == "other"


def test_self_time_shares_add_up_by_function_and_package() -> None:
    leaves = [
        ("start", "/p/apf_limiter/limiter.py", 3.0),
        ("start", "/p/apf_limiter/limiter.py", 1.0),  # the same function on another stack
        ("app", "/p/starlette/routing.py", 4.0),
        ("send", "/p/h11/_connection.py", 2.0),
    ]
    functions, packages = self_time_shares(leaves)
    assert functions[0] == ("start (apf_limiter: limiter)", 0.4)
    assert dict(functions)["app (starlette: routing)"] == 0.4
    assert packages == {"apf_limiter": 0.4, "starlette": 0.4, "h11": 0.2}


def _calls_len(n: int) -> int:
    total = 0
    for i in range(n):
        total += len(str(i))
    return total


def test_calls_per_request_charges_builtins_to_their_caller() -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    _calls_len(100)
    profiler.disable()
    calls = calls_per_request(pstats.Stats(profiler), 100)
    # 100 len() calls, made from this test file, plus the one Python call.
    assert calls[package_of(__file__)] == pytest.approx(1.01, abs=0.02)
    assert "builtins" not in calls
    assert calls["total"] == pytest.approx(sum(v for k, v in calls.items() if k != "total"))


# Enough requests for a few dozen pyinstrument samples on each path.
_REQUESTS = {"engine": 4000, "classification": 4000, "saturated": 2000, "http": 200}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_path_runs_and_counts_apf_calls(path: str) -> None:
    if not apf_limiter.engine._queueset.__file__.endswith(".py"):
        pytest.skip("profilers do not see into the mypyc-compiled modules")
    report = main(["--only", path, "--requests", str(_REQUESTS[path]), "--no-write"])
    result = report["paths"][path]
    calls = result["calls_per_request"]
    # Each path goes through APF's code on every request, and not much else for the engine.
    assert 2 <= calls["apf_limiter"] <= 200
    if path != "http":
        assert calls["apf_limiter"] / calls["total"] > 0.9
    timing = result["pyinstrument"]
    assert sum(timing["packages"].values()) == pytest.approx(1.0)
    assert timing["packages"].get("apf_limiter", 0) > 0
