"""The ``apf-limiter`` command: check configuration files and show what they amount to.

Subcommands:

* ``apf-limiter validate FILE...`` loads each file, prints every problem as
  ``FILE: <path>: <message>`` (or ``FILE: OK (...)``) and a summary; exits 1 if any file has a
  problem.
* ``apf-limiter show [FILE] [--server-concurrency-limit N] [--workers N]`` prints the
  concurrency plan of a file (or of the built-in default configuration) as text tables, and
  with ``--workers`` the seats per process and in total.
* ``apf-limiter defaults [--form short|kubernetes] [--json]`` prints the built-in
  configuration, to start one's own from.
* ``apf-limiter simulate CONFIG TRAFFIC [--json] [--compare OTHER] [--plot FILE]`` runs a
  traffic scenario through the real engine in fake time and reports what it does.
* ``apf-limiter replay CONFIG LOG [--format json|combined] [--field ROLE=NAME]...`` feeds a
  recorded access log through a configuration: shadow mode, offline.
* ``apf-limiter demo [--duration SECONDS] ...`` floods a local server with an elephant and
  some mice, behind a semaphore and then behind APF, and compares their latencies.

Exit status: 0 on success, 1 when a configuration is invalid, 2 on a usage error. Each
subcommand is a ``_Command`` in :data:`_COMMANDS`; adding one there adds it to the parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from apf_limiter._version import __version__

if TYPE_CHECKING:
    from apf_limiter._errors import ConfigProblem


PROG = "apf-limiter"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _problem_line(file: str, problem: ConfigProblem) -> str:
    # Problems about the file itself (unreadable, unparsable) carry the file name as their path.
    if problem.path in ("", file):
        return f"{file}: {problem.message}"
    return f"{file}: {problem}"


def _validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from apf_limiter._errors import ConfigError
    from apf_limiter.config._changes import describe_enforcement
    from apf_limiter.config._sources import load_source

    files: list[str] = args.files
    invalid = problems = 0
    for file in files:
        try:
            config = load_source(file)
        except ConfigError as error:
            invalid += 1
            problems += len(error.problems)
            for problem in error.problems:
                print(_problem_line(file, problem), file=out)
            continue
        levels = _plural(len(config.priority_levels), "priority level")
        schemas = _plural(len(config.flow_schemas), "flow schema")
        mode = describe_enforcement(config)
        print(f"{file}: OK ({levels}, {schemas}; enforcement {mode})", file=out)
    checked = _plural(len(files), "file")
    if invalid:
        print(
            f"{checked} checked: {len(files) - invalid} valid, {invalid} invalid "
            f"({_plural(problems, 'problem')})",
            file=out,
        )
        return 1
    print(f"{checked} checked: all valid", file=out)
    return 0


def _show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from apf_limiter._errors import ConfigError
    from apf_limiter._plan_render import render_plan
    from apf_limiter.config._sources import load_source
    from apf_limiter.engine._concurrency import plan_configuration

    file: str | None = args.file
    try:
        config = load_source(file)  # None: the built-in default configuration
    except ConfigError as error:
        for problem in error.problems:
            print(_problem_line(str(file), problem), file=err)
        print(f"{file}: invalid configuration, nothing to show", file=err)
        return 1
    plan = plan_configuration(config, args.server_concurrency_limit)
    source = file if file is not None else "built-in default configuration"
    out.write(render_plan(config, plan, source=source, workers=args.workers))
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive 32-bit integer (as serverConcurrencyLimit), got {text}"
        )
    return value


def _add_validate(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check configuration files and print every problem",
        description="Load each configuration file (YAML or JSON, our shape or Kubernetes "
        "manifests) and print every problem, one per line, prefixed by the file name. "
        "Exits 1 if any file has a problem.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="a .yaml, .yml or .json file")


def _add_show(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print the concurrency plan and flow schemas of a configuration",
        description="Print the limits of every priority level (nominal, lendable, lower and "
        "upper limits, maxSeats, queues) and the flow schemas in matching order. Without "
        "FILE, shows the built-in default configuration.",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="a .yaml, .yml or .json file")
    parser.add_argument(
        "--server-concurrency-limit",
        "-c",
        type=_positive_int,
        metavar="N",
        help="plan for N seats instead of the configuration's serverConcurrencyLimit",
    )
    parser.add_argument(
        "--workers",
        "-w",
        type=_positive_int,
        metavar="N",
        help="N worker processes (uvicorn --workers, gunicorn -w) or replicas: print the seats "
        "per process and in total (each process has its own limiter)",
    )


def _defaults(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import json

    from apf_limiter.config._defaults import default_configuration
    from apf_limiter.config._serialize import dump_config

    document = dump_config(default_configuration(), form=args.form)
    if args.json:
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    try:
        import yaml
    except ImportError:
        print(
            "printing YAML needs PyYAML (pip install 'apf_limiter[yaml]'); or use --json",
            file=err,
        )
        return 1
    out.write(
        "# The built-in web-app configuration of apf_limiter, to start your own from.\n"
        "# Check a file with: apf-limiter validate FILE; see its plan: apf-limiter show FILE\n"
        "# Add 'enforcement: Shadow' to run every request and only report what APF would do.\n"
    )
    out.write(yaml.safe_dump(document, sort_keys=False))
    return 0


def _add_defaults(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "defaults",
        help="print the built-in configuration, to start your own from",
        description="Print the built-in web-app configuration (what a limiter without a "
        "configuration uses) as YAML, or JSON with --json. Save it, edit it, check it with "
        "'apf-limiter validate'.",
    )
    parser.add_argument(
        "--form",
        choices=("short", "kubernetes"),
        default="short",
        help="short entries (the default) or full Kubernetes objects",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of YAML")


@dataclass(frozen=True)
class _Command:
    name: str
    add_arguments: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]
    run: Callable[[argparse.Namespace, TextIO, TextIO], int]


def _imported(
    name: str, module: str, add: str, run_name: str, help: str, description: str
) -> _Command:
    """A subcommand whose functions live in a module imported only once the parser is built.

    ``add(parser)`` adds its arguments and ``run_name(args, out, err)`` runs it; the module
    loads lazily because the demo needs uvicorn and simulate brings its own modules.
    """

    def add_arguments(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        parser = subparsers.add_parser(name, help=help, description=description)
        getattr(importlib.import_module(module), add)(parser)

    def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        status: int = getattr(importlib.import_module(module), run_name)(args, out, err)
        return status

    return _Command(name, add_arguments, run)


_COMMANDS: tuple[_Command, ...] = (
    _Command("validate", _add_validate, _validate),
    _Command("show", _add_show, _show),
    _Command("defaults", _add_defaults, _defaults),
    _imported(
        "simulate",
        "apf_limiter._simulate._command",
        "add_simulate",
        "simulate",
        "run a traffic scenario through a configuration, in fake time",
        "Run the traffic of a scenario file through the real engine in fake time "
        "and report, per priority level, flow schema and flow, the requests served, the queue "
        "wait p50/p99, the rejections with their reasons and Retry-After, and the seat limits "
        "over time. CONFIG 'default' is the built-in configuration. See docs/simulate.md.",
    ),
    _imported(
        "replay",
        "apf_limiter._simulate._command",
        "add_replay",
        "replay",
        "feed a recorded access log through a configuration: shadow mode, offline",
        "Read an access log (JSON lines, or the combined log format with a request "
        "time field), each line giving a request's start, duration, user or client, method "
        "and path, and report what APF would have done to it. Unreadable lines are counted "
        "and shown. See docs/simulate.md.",
    ),
    _imported(
        "demo",
        "apf_limiter._demo.command",
        "add_arguments",
        "run",
        "show APF at work: mice keep their latency while an elephant floods",
        "Start a demo server on 127.0.0.1 and drive a bounded loopback load: one "
        "elephant floods it while a few mice send a request now and then. Runs twice, behind "
        "a plain semaphore of the same capacity and behind APFMiddleware, then prints "
        "requests served, 429s, p50 and p99 latency per client. Needs uvicorn.",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``apf-limiter`` command."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kubernetes API Priority and Fairness for Python: configuration tools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _COMMANDS:
        command.add_arguments(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``apf-limiter`` command.

    Args:
        argv: The arguments after the program name; ``None`` reads ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success, 1 for an invalid configuration, 2 for a usage error.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        # argparse exits on --help, --version and usage errors; report its status instead.
        return exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    command = next(c for c in _COMMANDS if c.name == args.command)
    return command.run(args, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
