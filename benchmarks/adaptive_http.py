"""The adaptive server limit over real HTTP: uvicorn, a handler holding a 20-connection pool.

``pool_apf`` (:mod:`benchmarks.bench_app`) serves ``GET /work?ms=50``: the handler holds one
connection of a simulated database pool (an :class:`asyncio.Semaphore` of 20) for 50 ms, so
the server's knee is 20 requests at once. Two variants under the same closed-loop load
(``--connections`` keep-alive connections, the Python generator): ServerCL fixed at 20 (the
hindsight-best static limit), and ``adaptiveConcurrency`` starting at 100. The adaptive run
reports the ServerCL it learned (sampled every second from ``/_bench/stats``); the target is
[16, 30] with a p99 no worse than the static 20's.

``python -m benchmarks.adaptive_http`` prints both and writes
``benchmarks/results/adaptive_http.json``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.loadgen import LoadResult, run_python
from benchmarks.result_file import write_result
from benchmarks.servers import fetch_json, running_server

__all__ = ["main", "run_variant"]

_DEFAULT_OUT = Path(__file__).parent / "results" / "adaptive_http.json"


def run_variant(
    name: str, capacity: int, adaptive: bool, connections: int, duration: float
) -> dict[str, Any]:
    """Serve ``pool_apf`` and drive it; the load's figures and the ServerCL sampled."""
    env = {"APF_BENCH_CAPACITY": str(capacity), "APF_BENCH_ADAPTIVE": "1" if adaptive else "0"}
    with running_server(name, "pool_apf", env=env) as server:
        limits: list[tuple[float, int]] = []
        outcome: dict[str, LoadResult] = {}

        def drive() -> None:
            outcome["load"] = run_python(
                server.host,
                server.port,
                path="/work?ms=50",
                connections=connections,
                duration=duration,
            )

        driver = threading.Thread(target=drive)
        began = time.monotonic()
        driver.start()
        while driver.is_alive():
            stats = fetch_json(server.host, server.port, "/_bench/stats")
            limits.append((round(time.monotonic() - began, 1), stats["server_concurrency_limit"]))
            driver.join(1.0)
        load = outcome["load"]
    settled = [limit for t, limit in limits if t >= duration / 2]
    return {
        "variant": name,
        "rps": round(load.rps, 1),
        "p50": round(load.latency_p50, 4),
        "p99": round(load.latency_p99, 4),
        "statuses": {str(k): v for k, v in load.statuses.items()},
        "errors": load.errors,
        "learned_limit_median": statistics.median(settled) if settled else None,
        "learned_limit_range": [min(settled), max(settled)] if settled else None,
        "limits": limits,
    }


def main(argv: list[str] | None = None) -> None:
    """Run both variants, print them, write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=60)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=_DEFAULT_OUT)
    args = parser.parse_args(argv)
    rows = [
        run_variant("static-20", 20, False, args.connections, args.duration),
        run_variant("adaptive-from-100", 100, True, args.connections, args.duration),
    ]
    for row in rows:
        print({k: v for k, v in row.items() if k != "limits"})
    static, adaptive = rows
    median = adaptive["learned_limit_median"]
    result = {
        "connections": args.connections,
        "duration": args.duration,
        "rows": rows,
        "learned_in_range": median is not None and 16 <= median <= 30,
        "p99_ratio_to_static": round(adaptive["p99"] / static["p99"], 4),
    }
    print({k: v for k, v in result.items() if k != "rows"})
    write_result(result, args.out, default=_DEFAULT_OUT, quick=False)


if __name__ == "__main__":
    main()
