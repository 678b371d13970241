"""HTTP throughput: a hello-world Starlette app, bare and behind the limiters, side by side.

Run: ``.venv/bin/python -m benchmarks.http_bench`` (``--quick`` for a smoke test, ~20 s).

The variants run as uvicorn servers at the same time (one worker each, the same event loop
and HTTP implementation, h11 unless ``--http`` says otherwise, no access log; only the one
under load is busy):

* ``bare`` — the app alone;
* ``apf`` — behind :class:`~apf_limiter.asgi.APFMiddleware` with the built-in configuration;
* ``apf-no-headers`` — the same without the two ``X-APF-*`` response headers;
* ``semaphore`` — behind a semaphore middleware of the same total capacity (the built-in
  server concurrency limit, 600);
* ``limit-concurrency`` — the bare app under uvicorn's ``--limit-concurrency 600``.

Each round loads every variant once, in a rotated order, for ``--duration`` seconds with
``--connections`` keep-alive connections (``wrk`` when installed, else the Python generator of
:mod:`benchmarks.loadgen`, whose own ceiling is then measured and printed). The report gives,
per variant, the median and spread of requests per second and the median of the per-round
ratios to ``bare``; the results go to a JSON file for :mod:`benchmarks.plots`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from apf_limiter.config._defaults import default_configuration
from benchmarks.bench_app import build_info
from benchmarks.loadgen import LoadResult, generator_ceiling, run_load, wrk_path
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT, Server, running_server, uvicorn_impl

__all__ = ["VARIANTS", "machine", "main", "run"]

#: Variant name -> application factory (``limit-concurrency`` also gets uvicorn's option).
VARIANTS: dict[str, str] = {
    "bare": "hello_bare",
    "apf": "hello_apf",
    "semaphore": "hello_semaphore",
    "limit-concurrency": "hello_bare",
    "apf-no-headers": "hello_apf_no_headers",
}
DEFAULT_VARIANTS = ("bare", "apf", "apf-no-headers", "semaphore", "limit-concurrency")
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "http.json"
#: The targets, APF / bare: (build, handler µs) -> the minimum ratio. Hello world with the
#: headers on: pure Python 0.82 (0.85 the goal), compiled 0.93; a 0.5 ms handler, pure 0.97.
TARGETS: dict[tuple[str, float], float] = {
    ("pure Python", 0.0): 0.82,
    ("compiled", 0.0): 0.93,
    ("pure Python", 500.0): 0.97,
}


def machine() -> dict[str, Any]:
    """The machine: cores, CPU model, OS, Python."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    import os

    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
    else:
        q1, q3 = ordered[0], ordered[-1]
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
    }


def run(
    *,
    duration: float,
    rounds: int,
    connections: int,
    warmup: float,
    generator: str,
    capacity: int,
    threads: int = 1,
    handler_us: float = 0.0,
    variants: list[str] | None = None,
    http: str | None = None,
) -> dict[str, Any]:
    """Run the comparison; returns everything measured (what the JSON file holds)."""
    chosen = {name: VARIANTS[name] for name in (variants or list(DEFAULT_VARIANTS))}
    loop, protocol = uvicorn_impl()
    protocol = http or protocol
    result: dict[str, Any] = {
        "machine": machine(),
        "client_build": build_info(),
        "uvicorn_loop": loop,
        "uvicorn_http": protocol,
        "generator": generator,
        "connections": connections,
        "duration": duration,
        "rounds": rounds,
        "capacity": capacity,
        "handler_us": handler_us,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if generator == "python":
        ceiling = generator_ceiling(connections=connections, duration=duration)
        result["generator_ceiling_rps"] = ceiling.rps
        print(f"Python generator ceiling (canned-response server): {ceiling.rps:,.0f} req/s")
    env = {"APF_BENCH_CAPACITY": str(capacity), "APF_BENCH_HANDLER_US": str(handler_us)}
    samples: dict[str, list[float]] = {name: [] for name in chosen}
    failures: dict[str, int] = {name: 0 for name in chosen}
    ratios: dict[str, list[float]] = {name: [] for name in chosen}
    with ExitStack() as stack:
        servers: dict[str, Server] = {}
        for name, factory in chosen.items():
            extra = ["--limit-concurrency", str(capacity)] if name == "limit-concurrency" else []
            servers[name] = stack.enter_context(
                running_server(name, factory, uvicorn_args=extra, env=env, http=protocol)
            )
        result["server_build"] = servers["apf"].info
        print(_describe(result))
        for server in servers.values():  # warm up: imports, caches, the first connections
            run_load(
                generator,
                server.host,
                server.port,
                connections=connections,
                duration=warmup,
                threads=threads,
            )
        names = list(chosen)
        for index in range(rounds):
            order = names[index % len(names) :] + names[: index % len(names)]
            measured: dict[str, LoadResult] = {}
            for name in order:
                server = servers[name]
                measured[name] = run_load(
                    generator,
                    server.host,
                    server.port,
                    connections=connections,
                    duration=duration,
                    threads=threads,
                )
                samples[name].append(measured[name].rps)
                failures[name] += measured[name].non_2xx + measured[name].errors
            base = measured["bare"].rps
            for name in names:
                ratios[name].append(measured[name].rps / base)
            print(
                f"  round {index + 1}/{rounds}: "
                + ", ".join(f"{n} {measured[n].rps:,.0f}" for n in names)
                + " req/s"
            )
    result["variants"] = {
        name: {
            "rps": samples[name],
            "rps_stats": _quantiles(samples[name]),
            "ratio_to_bare": ratios[name],
            "ratio_stats": _quantiles(ratios[name]),
            "failures": failures[name],
        }
        for name in chosen
    }
    target = TARGETS.get((result["server_build"]["build"], handler_us))
    if "apf" in chosen and target is not None:
        apf = result["variants"]["apf"]["ratio_stats"]["median"]
        result["target"] = {"apf_ratio_min": target, "apf_ratio": apf, "met": apf >= target}
    return result


def _describe(result: dict[str, Any]) -> str:
    m = result["machine"]
    build = result["server_build"]
    return (
        f"Machine: {m['cores']} cores, {m['cpu']}, Python {m['python']}\n"
        f"Server: uvicorn {build['uvicorn']} (loop {result['uvicorn_loop']}, http "
        f"{result['uvicorn_http']}, 1 worker), Starlette {build['starlette']}; "
        f"apf_limiter build: {build['build']} ({build['queueset_file']})\n"
        f"Load: {result['generator']}, {result['connections']} keep-alive connections, "
        f"{result['rounds']} rounds x {result['duration']:g} s per variant, interleaved"
    )


def report(result: dict[str, Any]) -> str:
    """The table: per variant, req/s median [min–max] and the median ratio to bare."""
    lines = [
        f"{'variant':<18} {'req/s median':>12} {'min':>8} {'max':>8} "
        f"{'ratio to bare':>13} {'[min–max]':>13} {'failed':>7}"
    ]
    for name, data in result["variants"].items():
        rps, ratio = data["rps_stats"], data["ratio_stats"]
        lines.append(
            f"{name:<18} {rps['median']:>12,.0f} {rps['min']:>8,.0f} {rps['max']:>8,.0f} "
            f"{ratio['median']:>13.3f} {ratio['min']:>6.3f}–{ratio['max']:<6.3f} "
            f"{data['failures']:>7}"
        )
    target = result.get("target")
    if target is not None:
        verdict = "met" if target["met"] else "MISSED"
        lines.append(
            f"Target: APF throughput >= {target['apf_ratio_min']:.0%} of bare: "
            f"{target['apf_ratio']:.1%} ({verdict})"
        )
    if "generator_ceiling_rps" in result:
        bare = result["variants"]["bare"]["rps_stats"]["median"]
        lines.append(
            f"The Python generator ran at {bare / result['generator_ceiling_rps']:.0%} of its "
            f"own ceiling ({result['generator_ceiling_rps']:,.0f} req/s)."
        )
    return "\n".join(lines)


def main() -> None:
    """Parse options, run, print the report and write the JSON file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds")
    parser.add_argument("--connections", type=int, default=64, help="keep-alive connections")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per server")
    parser.add_argument(
        "--generator",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="load generator (auto: wrk when installed)",
    )
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument(
        "--capacity",
        type=int,
        default=default_configuration().server_concurrency_limit,
        help="semaphore size and --limit-concurrency (default: APF's server limit)",
    )
    parser.add_argument(
        "--handler-us",
        type=float,
        default=0.0,
        help="CPU microseconds the handler burns per request (default 0: hello world)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, 'bare' first (of: {', '.join(VARIANTS)})",
    )
    parser.add_argument(
        "--http",
        choices=("auto", "h11", "httptools"),
        default="h11",
        help="uvicorn's HTTP implementation (default h11, the reference; auto: uvicorn's pick)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 round x 2 s")
    args = parser.parse_args()
    if not args.variants.startswith("bare"):
        parser.error("--variants must start with bare (the baseline of every ratio)")
    if args.quick:
        args.duration, args.rounds, args.warmup = 2.0, 1, 0.5
    generator = args.generator
    if generator == "auto":
        generator = "wrk" if wrk_path() else "python"
    result = run(
        duration=args.duration,
        rounds=args.rounds,
        connections=args.connections,
        warmup=args.warmup,
        generator=generator,
        capacity=args.capacity,
        threads=args.threads,
        handler_us=args.handler_us,
        variants=[name.strip() for name in args.variants.split(",")],
        http=None if args.http == "auto" else args.http,
    )
    print(report(result))
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
