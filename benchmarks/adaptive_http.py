"""The adaptive server limit over real HTTP: uvicorn, a handler holding a 20-connection pool.

``pool_apf`` (:mod:`benchmarks.bench_app`) serves ``GET /work?ms=50``: the handler holds one
connection of a simulated database pool (an :class:`asyncio.Semaphore` of 20) for 50 ms, so
the server's knee is 20 requests at once. Two variants under the same closed-loop load
(``--connections`` keep-alive connections, the Python generator, timing every response):
ServerCL fixed at 20 (the hindsight-best static limit), and ``adaptiveConcurrency`` starting
at 100. The adaptive run reports the ServerCL it learned (sampled every second from
``/_bench/stats``); the target is [16, 30] with a p99 no worse than the static 20's.

One run of each says little on a 2-core machine shared with other work (the static variant
once served 297 requests/s and 352 in the next run), so the variants run in ``--rounds``
interleaved rounds, alternating which goes first, and the verdict is the median of the
per-round p99 ratios, with their spread. The p99 is taken over the same window in both
variants, after ``--warmup`` seconds: the adaptive run starts 5 × above the knee, and its first
seconds measure the descent, not where it lands (the whole run's p99 is recorded too).

``python -m benchmarks.adaptive_http`` prints every run and writes
``benchmarks/results/adaptive_http.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.adaptive_pool import closed_loop
from benchmarks.adaptive_sim import percentile
from benchmarks.bench_app import build_info
from benchmarks.loadgen import _Connection, _request, _Stats
from benchmarks.result_file import write_result
from benchmarks.servers import fetch_json, running_server

__all__ = ["main", "run_variant"]

_DEFAULT_OUT = Path(__file__).parent / "results" / "adaptive_http.json"
#: The variants: name, ServerCL (the start, when adaptive), adaptive.
VARIANTS: tuple[tuple[str, int, bool], ...] = (
    ("static-20", 20, False),
    ("adaptive-from-100", 100, True),
)


@dataclass(slots=True)
class _TimedStats(_Stats):
    """The generator's statistics, with each response's time since the start."""

    started: float = 0.0
    times: list[float] = field(default_factory=list)

    def record(self, status: int, latency: float) -> None:
        _Stats.record(self, status, latency)
        self.times.append(time.perf_counter() - self.started)


async def _drive(
    host: str, port: int, path: str, connections: int, duration: float, users: int
) -> _TimedStats:
    """``connections`` keep-alive connections, one request in flight each, for ``duration``.

    ``users`` > 0 spreads the connections over that many bearer tokens (APF users, so flows);
    0 sends none: every request is the same anonymous user, one flow.
    """
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    stats = _TimedStats(stop_at=started + duration, started=started)
    protocols: list[_Connection] = []
    for number in range(connections):
        headers = [("authorization", f"Bearer user-{number % users}")] if users else []
        request = _request(host, port, path, headers)
        try:
            _, protocol = await loop.create_connection(
                functools.partial(_Connection, request, stats), host, port
            )
        except OSError:
            stats.errors += 1
            continue
        protocols.append(protocol)
    await asyncio.wait([p.closed for p in protocols], timeout=duration + 15)
    for protocol in protocols:
        if protocol.transport is not None:
            protocol.transport.abort()
    return stats


def _window(stats: _TimedStats, start: float, end: float) -> dict[str, float]:
    latencies = [
        latency
        for at, latency in zip(stats.times, stats.latencies, strict=True)
        if start <= at < end
    ]
    return {
        "rps": round(len(latencies) / (end - start), 1),
        "p50": round(percentile(latencies, 0.5), 4),
        "p99": round(percentile(latencies, 0.99), 4),
    }


def run_variant(
    name: str,
    capacity: int,
    adaptive: bool,
    connections: int,
    duration: float,
    warmup: float,
    users: int = 0,
) -> dict[str, Any]:
    """Serve ``pool_apf`` and drive it; the load's figures and the ServerCL sampled."""
    env = {"APF_BENCH_CAPACITY": str(capacity), "APF_BENCH_ADAPTIVE": "1" if adaptive else "0"}
    with running_server(name, "pool_apf", env=env) as server:
        limits: list[tuple[float, int]] = []
        ratios: list[tuple[float, float]] = []
        outcome: dict[str, _TimedStats] = {}

        def drive() -> None:
            outcome["load"] = asyncio.run(
                _drive(server.host, server.port, "/work?ms=50", connections, duration, users)
            )

        driver = threading.Thread(target=drive)
        began = time.monotonic()
        driver.start()
        while driver.is_alive():
            stats = fetch_json(server.host, server.port, "/_bench/stats")
            at = round(time.monotonic() - began, 1)
            limits.append((at, stats["server_concurrency_limit"]))
            if "adaptive" in stats:
                ratios.append((at, round(stats["adaptive"]["last_ratio"], 3)))
            driver.join(1.0)
        load = outcome["load"]
    settled = [limit for t, limit in limits if t >= warmup]
    whole = _window(load, 0.0, duration)
    measured = _window(load, warmup, duration)
    # The p99 of each second, to see when the tail happens.
    per_second = [_window(load, float(s), float(s + 1))["p99"] for s in range(int(duration))]
    return {
        "variant": name,
        "rps": measured["rps"],
        "p50": measured["p50"],
        "p99": measured["p99"],
        "whole_run": whole,
        "statuses": {str(k): v for k, v in load.statuses.items()},
        "errors": load.errors,
        "limit_after_warmup_median": statistics.median(settled) if settled else None,
        "limit_after_warmup_range": [min(settled), max(settled)] if settled else None,
        "limit_end": limits[-1][1] if limits else None,
        "limits": limits,
        "latency_ratios": ratios,
        "p99_per_second": per_second,
    }


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the interleaved rounds, print them, write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=60)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds left out of the p99")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--users", type=int, default=0, help="bearer tokens over the connections (0: anonymous)"
    )
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT)
    args = parser.parse_args(argv)
    rounds = []
    for number in range(args.rounds):
        # Alternate which variant goes first, so that a drift of the machine favours neither.
        order = VARIANTS if number % 2 == 0 else VARIANTS[::-1]
        runs = {}
        for name, capacity, adaptive in order:
            row = run_variant(
                name, capacity, adaptive, args.connections, args.duration, args.warmup, args.users
            )
            print(
                {k: v for k, v in row.items() if k not in ("limits", "latency_ratios")},
                flush=True,
            )
            runs[name] = row
        static, learned = runs["static-20"], runs["adaptive-from-100"]
        rounds.append(
            {
                "runs": runs,
                "p99_ratio": round(learned["p99"] / static["p99"], 4),
                "p99_ratio_whole_run": round(
                    learned["whole_run"]["p99"] / static["whole_run"]["p99"], 4
                ),
                "rps_ratio": round(learned["rps"] / static["rps"], 4),
            }
        )
        print({k: v for k, v in rounds[-1].items() if k != "runs"}, flush=True)
    ends = [r["runs"]["adaptive-from-100"]["limit_end"] for r in rounds]
    medians = [r["runs"]["adaptive-from-100"]["limit_after_warmup_median"] for r in rounds]
    result = {
        "build": build_info(),
        "connections": args.connections,
        "users": args.users,
        "duration": args.duration,
        "warmup": args.warmup,
        "rounds": rounds,
        "learned_limit_end": ends,
        "learned_in_range": all(m is not None and 16 <= m <= 30 for m in [*ends, *medians]),
        "p99_ratio": _spread([r["p99_ratio"] for r in rounds]),
        "p99_ratio_whole_run": _spread([r["p99_ratio_whole_run"] for r in rounds]),
        "rps_ratio": _spread([r["rps_ratio"] for r in rounds]),
    }
    # The same closed loop in fake time (exact): static limits around the pool's size, and the
    # adaptive one, so that what a ServerCL above the pool costs is seen without noise.
    result["fake_time"] = [
        closed_loop(limit, adaptive=adaptive, users=max(1, args.users), clients=args.connections)
        for limit, adaptive in ((20, False), (22, False), (25, False), (30, False), (100, True))
    ]
    for row in result["fake_time"]:
        print(f"fake time: {row}")
    print({k: v for k, v in result.items() if k not in ("rounds", "fake_time")})
    write_result(result, args.out, default=_DEFAULT_OUT, quick=False)


if __name__ == "__main__":
    main()
