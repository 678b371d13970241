"""Profiles of the hot paths: where a request's time goes, function by function.

Run: ``.venv/bin/python -m benchmarks.profile_hot_paths`` (``--quick`` for a smoke test;
``--flamegraph`` additionally records an SVG flame graph of the HTTP path with py-spy).

Four paths, each run in a loop under two profilers:

* ``engine``: ``async with limiter.admit(digest)`` with free seats, and its release (the
  default configuration; classification included);
* ``classification``: ``Classifier.classify`` over 20 flow schemas of mixed rules, for
  requests of varied users, verbs and paths;
* ``saturated``: one arrival that must queue plus one completion that dispatches, at a level
  with 64 queues, 1,000 flows and 2,000 waiting requests (the sans-IO controller);
* ``http``: a hello-world Starlette app behind :class:`~apf_limiter.asgi.APFMiddleware`, served
  by uvicorn's h11 protocol in-process (the driver of :mod:`benchmarks.http_instructions`).

**pyinstrument** (statistical) gives each function's share of the self time, and each
package's share (for ``http``: APF against Starlette, uvicorn, h11 and asyncio). **cProfile**
(deterministic) gives the Python function calls per request, a figure that does not depend on
the machine's noise: every call that an optimisation removes shows up here.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from apf_limiter import Limiter, RequestDigest
from apf_limiter.engine._classifier import Classifier
from benchmarks.bench_app import build_info
from benchmarks.engine_bench import USER, saturated_level, twenty_schemas_config
from benchmarks.http_bench import machine
from benchmarks.result_file import write_result

__all__ = ["PATHS", "Profile", "calls_per_request", "main", "package_of", "self_time_shares"]

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "profile.json"
TOP = 12

# Where a frame's code lives, by the path of its file: the first match wins.
_PACKAGES = (
    ("apf_limiter", "/apf_limiter/"),
    ("starlette", "/starlette/"),
    ("uvicorn", "/uvicorn/"),
    ("h11", "/h11/"),
    ("asyncio", "/asyncio/"),
    ("benchmark driver", "/benchmarks/"),
)


def package_of(file_path: str) -> str:
    """The package a code object belongs to (``"other"`` for the rest, incl. builtins)."""
    path = file_path.replace("\\", "/")
    for name, marker in _PACKAGES:
        if marker in path:
            return name
    return "other"


class Profile:
    """One profiled path: a callable running ``requests`` requests, and what it measured."""

    def __init__(self, name: str, requests: int, run: Callable[[], None]) -> None:
        self.name = name
        self.requests = requests
        self.run = run


def _engine(requests: int) -> Profile:
    limiter = Limiter(hash_seed=1)
    loop = asyncio.new_event_loop()

    async def admit() -> None:
        for _ in range(requests):
            async with limiter.admit(USER):
                pass

    loop.run_until_complete(admit())  # warm up, outside the profile
    return Profile("engine", requests, lambda: loop.run_until_complete(admit()))


def _classification(requests: int) -> Profile:
    limiter = Limiter(twenty_schemas_config(), hash_seed=1)
    classifier: Classifier = limiter._core.controller.classifier
    digests = [
        RequestDigest(
            user=f"user-{i % 50}",
            groups=(f"team-{i % 7}", "system:authenticated"),
            verb=("get", "post", "put", "delete")[i % 4],
            path=f"/svc{i % 25}" if i % 3 else f"/v{i % 19}/items",
        )
        for i in range(1000)
    ]
    batches = max(1, requests // len(digests))

    def run() -> None:
        classify = classifier.classify
        for _ in range(batches):
            for digest in digests:
                classify(digest)

    return Profile("classification", batches * len(digests), run)


def _saturated(requests: int) -> Profile:
    step = saturated_level(64, 1000)

    def run() -> None:
        step(requests)

    return Profile("saturated", requests, run)


def _http(requests: int) -> Profile:
    from benchmarks.http_instructions import drive

    # Start-up (the app, the server's protocol objects, the first requests) stays outside the
    # profile: only the requests of the run are measured.
    loop = asyncio.new_event_loop()
    driver = loop.run_until_complete(drive("apf", "h11", 0, warmup=400))
    return Profile("http", requests, lambda: loop.run_until_complete(driver.run(requests)))


PATHS: dict[str, Callable[[int], Profile]] = {
    "engine": _engine,
    "classification": _classification,
    "saturated": _saturated,
    "http": _http,
}
FULL_REQUESTS = {"engine": 100_000, "classification": 100_000, "saturated": 50_000, "http": 5_000}


def _leaves(frame: Any) -> Iterable[tuple[str, str, float]]:
    """``(function, file path, self seconds)`` of every frame of a pyinstrument tree.

    A built-in (C) function has no file: it is charged to the file of the Python code that
    called it, so that ``dict.get`` inside the engine counts as the engine's time.
    """
    stack: list[tuple[Any, str]] = [(frame, "")]
    while stack:
        frame, caller_file = stack.pop()
        file_path = frame.file_path or ""
        if not file_path or file_path.startswith("<built-in"):
            file_path = caller_file
        if not frame.is_synthetic:
            yield frame.function, file_path, frame.total_self_time
        stack.extend((child, file_path) for child in frame.children)


def self_time_shares(
    leaves: Iterable[tuple[str, str, float]],
) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Shares of the self time, by function (largest first) and by package.

    Args:
        leaves: ``(function, file path, self seconds)`` triples (a function may repeat).

    Returns:
        ``([(function label, share), ...], {package: share})``, shares summing to 1.
    """
    by_function: dict[str, float] = {}
    by_package: dict[str, float] = {}
    for function, file_path, seconds in leaves:
        package = package_of(file_path)
        name = Path(file_path).stem if file_path else "?"
        label = f"{function} ({package}: {name})"
        by_function[label] = by_function.get(label, 0.0) + seconds
        by_package[package] = by_package.get(package, 0.0) + seconds
    total = sum(by_package.values()) or 1.0
    functions = [
        (label, seconds / total)
        for label, seconds in sorted(by_function.items(), key=lambda item: -item[1])
    ]
    packages = {
        name: seconds / total
        for name, seconds in sorted(by_package.items(), key=lambda item: -item[1])
    }
    return functions, packages


def calls_per_request(stats: pstats.Stats, requests: int) -> dict[str, float]:
    """Function calls per request from cProfile statistics, in total and by package.

    Calls of built-in (C) functions are charged to the package of their callers.
    """
    by_package: Counter[str] = Counter()
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]]
    raw = stats.stats  # type: ignore[attr-defined]
    for (file_path, _line, _function), (_primitive, calls, _tt, _ct, callers) in raw.items():
        if file_path != "~":
            by_package[package_of(file_path)] += calls
            continue
        for (caller_file, _, _), caller_stats in callers.items():
            by_package[package_of(caller_file)] += caller_stats[1]
    result = {"total": sum(by_package.values()) / requests}
    result.update(
        {
            name: calls / requests
            for name, calls in sorted(by_package.items(), key=lambda kv: -kv[1])
        }
    )
    return result


def _pyinstrument(profile: Profile) -> dict[str, Any]:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002, async_mode="disabled")
    profiler.start()
    profile.run()
    session = profiler.stop()
    root = session.root_frame()
    functions, packages = self_time_shares(_leaves(root) if root is not None else ())
    return {
        "samples": session.sample_count,
        "seconds": session.duration,
        "top_functions": functions[:TOP],
        "packages": packages,
        "apf_functions": [item for item in functions if "(apf_limiter:" in item[0]][:TOP],
    }


def _cprofile(profile: Profile) -> dict[str, float]:
    profiler = cProfile.Profile()
    profiler.enable()
    profile.run()
    profiler.disable()
    return calls_per_request(pstats.Stats(profiler), profile.requests)


def _print(name: str, result: dict[str, Any]) -> None:
    calls = result["calls_per_request"]
    print(f"\n== {name}: {result['requests']} requests")
    print(
        "   calls per request (cProfile): "
        + ", ".join(f"{key} {value:.1f}" for key, value in calls.items())
    )
    timing = result.get("pyinstrument")
    if timing is None:
        return
    print(
        "   self time by package: "
        + ", ".join(f"{key} {share:.0%}" for key, share in timing["packages"].items())
    )
    for label, share in timing["top_functions"]:
        print(f"   {share:6.1%}  {label}")


def _flamegraph(out: Path, requests: int) -> None:
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        print("py-spy is not installed (pip install py-spy): no flame graph")
        return
    command = [py_spy, "record", "--rate", "2000", "--output", str(out), "--"]
    command += [sys.executable, "-m", "benchmarks.profile_hot_paths", "--only", "http"]
    command += ["--requests", str(requests), "--run-only"]
    subprocess.run(command, check=True)
    print(f"flame graph: {out}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Profile the hot paths, print the tables and (unless ``--no-write``) save them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--only", choices=sorted(PATHS), action="append", help="paths to run")
    parser.add_argument("--requests", type=int, help="requests per path (default per path)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--no-pyinstrument", action="store_true", help="cProfile counts only")
    parser.add_argument(
        "--flamegraph", action="store_true", help="also record apf_flame.svg with py-spy"
    )
    parser.add_argument(
        "--run-only", action="store_true", help="run the paths unprofiled (under py-spy)"
    )
    args = parser.parse_args(argv)
    if args.run_only:
        for name in args.only or list(PATHS):
            PATHS[name](args.requests or FULL_REQUESTS[name]).run()
        return {}
    build = build_info()
    if build["compiled_modules"]:
        print("note: profilers do not see into mypyc-compiled modules; profile the pure build")
    results: dict[str, Any] = {}
    for name in args.only or list(PATHS):
        requests = args.requests or FULL_REQUESTS[name] // (20 if args.quick else 1)
        result: dict[str, Any] = {"requests": requests}
        result["calls_per_request"] = _cprofile(PATHS[name](requests))
        if not args.no_pyinstrument:
            result["pyinstrument"] = _pyinstrument(PATHS[name](requests))
        results[name] = result
        _print(name, result)
    report = {"machine": machine(), "build": build, "paths": results}
    out = args.out
    if not args.no_write:
        out = write_result(report, args.out, default=DEFAULT_OUT, quick=args.quick, indent=2)
    if args.flamegraph:
        _flamegraph(out.parent / "apf_flame.svg", FULL_REQUESTS["http"])
    return report


if __name__ == "__main__":
    main()
