"""``apf-limiter demo``: an elephant and some mice, behind a semaphore and then behind APF.

The demo starts its application under uvicorn on 127.0.0.1 (a free port, a child process),
drives a bounded loopback load against it twice — first behind a plain semaphore of the same
capacity, then behind :class:`~apf_limiter.asgi.APFMiddleware` — and prints a side-by-side
table per client: requests served, 429s, p50 and p99 latency. The load comes from a process of
its own (:mod:`apf_limiter._demo.generator`) whose CPU time and event-loop lag are measured:
the closing sentences (:mod:`apf_limiter._demo.verdict`) follow the table, or warn that the
generator could not keep up.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from apf_limiter._demo.load import ClientResult, LoadOptions, LoadRun, run_load
from apf_limiter._demo.report import progress_line, render_table
from apf_limiter._demo.verdict import closing, generator_line

if TYPE_CHECKING:
    from apf_limiter._demo.app import Mode


_STARTUP_ALLOWANCE = 1.0  # seconds a server start-up takes, roughly, per run
_RUNS: tuple[Mode, ...] = ("semaphore", "apf")


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The demo's settings (the command-line options).

    Attributes:
        duration: Seconds the whole demo should take, about (two runs and their start-ups).
        elephant_concurrency: Requests the elephant keeps in flight.
        mice: Number of mice.
        mouse_interval: Mean seconds between two requests of a mouse.
        capacity: Requests the server runs at once (the semaphore's size, APF's seats).
        service_time: Seconds the endpoint takes.
        generator_burn: CPU seconds the load generator wastes after each response, to starve
            it (for the tests of the saturation warning; not a command-line option).
    """

    duration: float = 30.0
    elephant_concurrency: int = 64
    mice: int = 4
    mouse_interval: float = 0.25
    capacity: int = 8
    service_time: float = 0.1
    generator_burn: float = 0.0

    @property
    def load(self) -> LoadOptions:
        """The load of each of the two runs."""
        per_run = max(1.0, (self.duration - 2 * _STARTUP_ALLOWANCE) / 2)
        return LoadOptions(
            duration=per_run,
            warmup=min(1.0, per_run / 10),
            elephant_concurrency=self.elephant_concurrency,
            mice=self.mice,
            mouse_interval=self.mouse_interval,
            generator_burn=self.generator_burn,
        )


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to its subcommand parser."""
    defaults = DemoOptions()
    options: list[tuple[str, type[int] | type[float], object, str]] = [
        ("--duration", float, defaults.duration, "about how long the demo takes, in seconds"),
        ("--elephant", int, defaults.elephant_concurrency, "requests the elephant keeps in flight"),
        ("--mice", int, defaults.mice, "number of mice"),
        ("--mouse-interval", float, defaults.mouse_interval, "seconds between a mouse's requests"),
        ("--capacity", int, defaults.capacity, "requests the server runs at once"),
        ("--service-time", float, defaults.service_time, "seconds the endpoint takes"),
    ]
    for flag, kind, default, text in options:
        parser.add_argument(
            flag,
            type=_positive(kind),
            default=default,
            metavar="N" if kind is int else "SECONDS",
            help=f"{text} (default {default})",
        )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the demo from parsed command-line arguments; returns the exit status."""
    if importlib.util.find_spec("uvicorn") is None:
        print(
            "apf-limiter demo needs uvicorn: pip install 'apf_limiter[demo]' "
            "(from a clone: pip install '.[demo]', or make demo)",
            file=err,
        )
        return 1
    options = DemoOptions(
        duration=args.duration,
        elephant_concurrency=args.elephant,
        mice=args.mice,
        mouse_interval=args.mouse_interval,
        capacity=args.capacity,
        service_time=args.service_time,
    )
    asyncio.run(run_demo(options, out))
    return 0


async def run_demo(options: DemoOptions, out: TextIO) -> dict[str, LoadRun]:
    """Run both runs, printing progress, the final table and the closing sentences to ``out``.

    Returns:
        The runs (``semaphore``, ``apf``): results by client, and the generator's report.
    """
    # Imported here so that building the CLI parser stays light.
    from apf_limiter._demo.server import running_server

    load = options.load
    out.write(
        f"apf-limiter demo: 1 elephant ({options.elephant_concurrency} requests in flight) and "
        f"{options.mice} mice (1 request every ~{options.mouse_interval:g} s)\n"
        f"against a {options.service_time * 1000:.0f} ms endpoint that runs "
        f"{options.capacity} requests at once; {load.duration:.0f} s per run "
        f"(the first {load.warmup:g} s not counted).\n"
        "APF: one priority level, fair queuing per user (the bearer token), "
        "64 queues, hand size 6, 4 requests per queue.\n\n"
    )
    out.flush()
    runs: dict[str, LoadRun] = {}
    for mode in _RUNS:
        printer = _ProgressPrinter(out, mode, load.duration)
        async with running_server(
            mode, capacity=options.capacity, service_time=options.service_time
        ) as url:
            runs[mode] = await run_load(url, load, printer)
        printer.finish(runs[mode].results)
        out.write(generator_line(runs[mode].generator, options.service_time))
    table = render_table({mode: run.results for mode, run in runs.items()})
    out.write("\n" + table + "\n" + closing(runs, options.service_time))
    out.flush()
    return runs


class _ProgressPrinter:
    """Live progress: one line rewritten in place on a terminal, a few lines otherwise."""

    def __init__(self, out: TextIO, mode: Mode, duration: float) -> None:
        self._out = out
        self._mode = mode
        self._duration = duration
        self._live = out.isatty()
        self._next = max(1.0, duration / 4)

    def __call__(self, elapsed: float, results: Mapping[str, ClientResult]) -> None:
        line = progress_line(self._mode, elapsed, self._duration, results)
        if self._live:
            self._out.write("\r" + line + "\x1b[K")
        elif self._next <= elapsed < self._duration:  # finish() prints the last line
            self._next = elapsed + max(1.0, self._duration / 4)
            self._out.write(line + "\n")
        self._out.flush()

    def finish(self, results: Mapping[str, ClientResult]) -> None:
        line = progress_line(self._mode, self._duration, self._duration, results)
        self._out.write(("\r" + line + "\x1b[K\n") if self._live else line + "\n")
        self._out.flush()
