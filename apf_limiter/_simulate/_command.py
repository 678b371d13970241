"""The ``simulate`` and ``replay`` subcommands of ``apf-limiter``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from apf_limiter._simulate._report import build_report, render_comparison, render_text
from apf_limiter._simulate._run import Simulation
from apf_limiter._simulate._sources import ListSource, Source, scenario_sources

#: The CONFIG argument that names the built-in configuration.
BUILT_IN = "default"


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options both subcommands share."""
    parser.add_argument(
        "config",
        metavar="CONFIG",
        help=f"a configuration file, or {BUILT_IN!r} for the built-in one",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--compare", metavar="OTHER_CONFIG", help="also run OTHER_CONFIG; print both side by side"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw seat limits and waits (needs apf_limiter[plot])"
    )
    parser.add_argument(
        "--hash-seed", type=int, default=0, metavar="N", help="seed of the engine's flow hash"
    )


def add_simulate(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``simulate``."""
    add_common(parser)
    parser.add_argument("traffic", metavar="TRAFFIC", help="a scenario file (.yaml or .json)")


def add_replay(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``replay``."""
    add_common(parser)
    parser.add_argument("log", metavar="LOG", help="an access log")
    parser.add_argument(
        "--format",
        choices=("json", "combined"),
        default="json",
        help="JSON lines (the default) or the combined log format with a request time field",
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="ROLE=NAME",
        help="where a role (start, duration, user, client, method, path) is read; repeatable",
    )
    parser.add_argument(
        "--duration-unit", choices=("s", "ms", "us"), default="s", help="unit of the duration"
    )


def _load(name: str, err: TextIO) -> Any:
    from apf_limiter._errors import ConfigError
    from apf_limiter.config._sources import load_source

    try:
        return load_source(None if name == BUILT_IN else name)
    except ConfigError as error:
        for problem in error.problems:
            # A problem of the file itself (unreadable, too large) is already named after it,
            # as `apf-limiter validate` prints it: say the name once.
            line = problem.message if problem.path in ("", name) else str(problem)
            print(f"{name}: {line}", file=err)
        print(f"{name}: invalid configuration, nothing simulated", file=err)
        return None


def _run(
    args: argparse.Namespace,
    make_sources: Any,
    traffic: str,
    out: TextIO,
    err: TextIO,
    record: int = 0,
    sample_period: float | None = None,
) -> int:
    names = [args.config] + ([args.compare] if args.compare else [])
    configs = [_load(name, err) for name in names]
    if any(config is None for config in configs):
        return 1
    reports = []
    for name, config in zip(names, configs, strict=True):
        if config.adaptive_concurrency is not None:
            print(
                f"{name}: adaptiveConcurrency is not simulated; the static "
                "serverConcurrencyLimit is used",
                file=err,
            )
        sources: Sequence[Source] = make_sources()
        simulation = Simulation(
            config, hash_seed=args.hash_seed, sample_period=sample_period, record=record
        )
        result = simulation.run(sources)
        label = "built-in default configuration" if name == BUILT_IN else name
        reports.append(build_report(result, config=label, traffic=traffic))
    if args.json:
        document: Any = reports[0] if len(reports) == 1 else {"a": reports[0], "b": reports[1]}
        out.write(json.dumps(document, indent=2) + "\n")
    elif len(reports) == 1:
        out.write(render_text(reports[0]))
    else:
        out.write(render_comparison(reports[0], reports[1]))
    if args.plot:
        try:
            from apf_limiter._simulate._plot import plot_reports

            plot_reports(reports, args.plot)
        except ImportError:
            print(
                "plots need matplotlib (pip install 'apf_limiter[plot]'); no plot drawn", file=err
            )
            return 0
        print(f"plot written to {args.plot}", file=err)
    return 0


def simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``apf-limiter simulate``."""
    from apf_limiter._simulate._scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.traffic)
    except ScenarioError as error:
        for problem in error.problems:
            print(f"{args.traffic}: {problem}", file=err)
        print(f"{args.traffic}: invalid scenario, nothing simulated", file=err)
        return 1
    return _run(
        args,
        lambda: scenario_sources(scenario),
        args.traffic,
        out,
        err,
        sample_period=scenario.sample_period,
    )


def replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``apf-limiter replay``."""
    from apf_limiter._simulate._replay import parse_fields, read_log

    try:
        mapping = parse_fields(args.field, args.format)
    except ValueError as error:
        print(str(error), file=err)
        return 2
    try:
        with open(args.log, "rb") as stream:
            log = read_log(stream, args.format, mapping, args.duration_unit)
    except OSError as error:
        print(f"{args.log}: cannot read: {error.strerror or error}", file=err)
        return 1
    print(
        f"{args.log}: {log.lines} lines, {len(log.arrivals)} requests read, {log.bad} unreadable",
        file=err,
    )
    for number, why in log.bad_lines:
        print(f"{args.log}:{number}: unreadable: {why}", file=err)
    if log.bad > len(log.bad_lines):
        print(f"{args.log}: ... and {log.bad - len(log.bad_lines)} more unreadable lines", file=err)
    if log.truncated:
        print(f"{args.log}: stopped after {len(log.arrivals)} requests", file=err)
    if not log.arrivals:
        print(f"{args.log}: no request to replay", file=err)
        return 1
    return _run(args, lambda: [ListSource(log.arrivals)], args.log, out, err)
