"""How fast ``apf-limiter simulate`` runs: one hour of 1,000 requests a second (3.6 M requests).

The traffic: 800 req/s from 100 web users (exponential service times, mean 0.1 s) and a 200
req/s flood from one tenant's batch user (exponential, mean 3 s: it alone wants the whole
server, so its queues fill, waits time out and borrowing moves seats), through the built-in
configuration. Prints the wall and CPU time of the run and of the run with its report,
requests per second, and a digest of the report's JSON (an optimisation must not change it).

Run: ``python -m benchmarks.simulate_bench [--duration SECONDS]`` (3600 by default).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from apf_limiter._simulate._report import build_report
from apf_limiter._simulate._run import Simulation
from apf_limiter._simulate._scenario import parse_scenario
from apf_limiter._simulate._sources import scenario_sources
from apf_limiter.config._sources import load_source


def scenario_document(duration: float) -> dict[str, object]:
    """The benchmark's traffic: 1,000 requests a second for ``duration`` seconds."""
    return {
        "duration": duration,
        "seed": 1,
        "flows": [
            {
                "name": "web",
                "user": "user-{i}",
                "users": 100,
                "rate": 800,
                "service": {"distribution": "exponential", "mean": 0.1},
            },
            {
                "name": "flood",
                "user": "batch",
                "rate": 200,
                "service": {"distribution": "exponential", "mean": 3.0},
            },
        ],
    }


def _compiled() -> bool:
    import apf_limiter.engine._controller as controller

    return not controller.__file__.endswith(".py")


def main() -> None:
    """Run the benchmark and print what it measured."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3600.0)
    args = parser.parse_args()
    scenario = parse_scenario(scenario_document(args.duration))
    config = load_source(None)
    began = time.perf_counter()
    cpu = time.process_time()
    result = Simulation(config).run(scenario_sources(scenario))
    ran = time.perf_counter() - began
    ran_cpu = time.process_time() - cpu
    report = build_report(result, config="built-in", traffic="benchmark")
    reported = time.perf_counter() - began
    reported_cpu = time.process_time() - cpu
    requests = report["requests"]
    # The report's digest: an optimisation of the loop must leave it as it was.
    digest = hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest()[:16]
    print(f"simulated {args.duration:.0f}s of traffic: {requests} requests, {result.events} events")
    print(
        f"run {ran:.1f}s ({ran_cpu:.1f}s of CPU; the machine may be shared); with the report "
        f"{reported:.1f}s ({reported_cpu:.1f}s of CPU): {requests / ran:,.0f} requests/s"
    )
    print(f"engine: {'compiled' if _compiled() else 'pure Python'}; report sha256 {digest}")
    for name, flow in report["flows"].items():
        print(f"  {name}: served {flow['served']}, rejected {flow['rejected']}")


if __name__ == "__main__":
    main()
