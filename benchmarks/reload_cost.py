"""What a very large configuration file costs to reload: read and parse, build, apply.

Run: ``.venv/bin/python -m benchmarks.reload_cost`` (``--quick`` for a short run).

For each size (5,000 and 50,000 flow schemas of one subject and one resource rule each, in
YAML), in a fresh process each so that peak memory is its own:

1. the file's size;
2. the worker thread's part of a reload: reading, parsing and validating
   (``load_file_content``), then building the classifier (``Controller.prepare``), in seconds;
3. the resident memory that adds at its peak (``ru_maxrss``), in MiB, over a limiter already
   running a configuration of that size;
4. the limiter thread's part, the event-loop stall: ``Core.reconfigure`` with the
   classifier built beforehand (what a reload runs), and, for comparison, ``reconfigure``
   building it on the spot (what a reload did before).

The results go to ``benchmarks/results/reload_cost.json`` (``--out`` for another file).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT

__all__ = ["main", "measure", "schema_text"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "reload_cost.json"


def schema_text(count: int, user_suffix: str = "") -> bytes:
    """A YAML configuration with one queuing level and ``count`` flow schemas."""
    lines = [
        "serverConcurrencyLimit: 100",
        "priorityLevels:",
        "- name: work",
        "  type: Limited",
        "  limited:",
        "    nominalConcurrencyShares: 30",
        "    limitResponse:",
        "      {type: Queue, queuing: {queues: 64, handSize: 6, queueLengthLimit: 50}}",
        "flowSchemas:",
    ]
    for i in range(count):
        lines += [
            f"- name: schema-{i}",
            "  priorityLevelConfiguration: {name: work}",
            f"  matchingPrecedence: {500 + i % 9000}",
            "  distinguisherMethod: {type: ByUser}",
            "  rules:",
            f"  - subjects: [{{kind: User, user: {{name: user-{i}{user_suffix}}}}}]",
            "    resourceRules:",
            "    - {verbs: [get, list], apiGroups: ['*'], resources: [pods], namespaces: ['*']}",
        ]
    return ("\n".join(lines) + "\n").encode()


def measure(count: int) -> dict[str, float]:
    """Measure one size in this process (see the module's docstring)."""
    from apf_limiter import Limiter
    from apf_limiter.config._sources import load_file_content

    limiter = Limiter(load_file_content(schema_text(count), "apf.yaml"), hash_seed=1)
    data = schema_text(count, "-new")
    # The high-water mark of resident memory, over a limiter that already runs a configuration
    # of this size: what a reload adds (a first load's own peak is not counted).
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    config = load_file_content(data, "apf.yaml")
    parsed = time.perf_counter()
    classifier = limiter._core.controller.prepare(config)
    built = time.perf_counter()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    limiter._core.reconfigure(config, classifier)
    applied = time.perf_counter()
    again = load_file_content(schema_text(count, "-again"), "apf.yaml")
    started_unprepared = time.perf_counter()
    limiter.reconfigure(again)  # the classifier built on the spot, on this thread
    unprepared = time.perf_counter() - started_unprepared
    return {
        "flow_schemas": count,
        "file_mib": round(len(data) / 2**20, 2),
        "parse_s": round(parsed - started, 3),
        "build_classifier_s": round(built - parsed, 3),
        "peak_memory_added_mib": round((rss_after - rss_before) / 1024, 1),
        "apply_stall_s": round(applied - built, 4),
        "apply_stall_building_on_the_loop_s": round(unprepared, 3),
    }


def main(argv: list[str] | None = None) -> None:
    """Run each size in its own process and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="500 and 5,000 schemas only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child's size
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return
    sizes = [500, 5000] if args.quick else [5000, 50000]
    runs: list[dict[str, Any]] = []
    for count in sizes:
        output = subprocess.run(
            [sys.executable, "-m", "benchmarks.reload_cost", "--one", str(count)],
            cwd=REPO_ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(output.strip().splitlines()[-1]))
        print(runs[-1])
    write_result({"runs": runs}, args.out, default=DEFAULT_OUT, quick=args.quick)


if __name__ == "__main__":
    main()
