"""The demo's load, seen from the command: its options, its results, and the generator process.

The elephant and the mice run in a process of their own (:mod:`apf_limiter._demo.generator`),
so that the load competes with nothing in the command's process and its CPU time can be
measured alone. It reports what the clients saw four times a second as JSON lines on its
standard output (the latencies and counts since the previous line), then how busy it was:
:class:`GeneratorReport`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

ELEPHANT = "elephant"
DRAIN_TIMEOUT = 20.0
"""Seconds the generator waits, after the run, for the requests still in flight."""

_EXIT_TIMEOUT = 15.0  # seconds the command allows the generator beyond that


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """The load of one run.

    Attributes:
        duration: Seconds of load (the warm-up included).
        warmup: Seconds at the start whose requests are not counted.
        elephant_concurrency: Requests the elephant keeps in flight.
        mice: Number of mice.
        mouse_interval: Mean seconds a mouse waits between two requests.
        seed: Seed of the mice's jitter.
        generator_burn: CPU seconds the generator wastes after each response: a starved
            generator, for the tests of the saturation warning (0 in a real demo).
    """

    duration: float
    warmup: float
    elephant_concurrency: int
    mice: int
    mouse_interval: float
    seed: int = 7
    generator_burn: float = 0.0

    def client_names(self) -> list[str]:
        """The clients, the elephant first, then the mice in order."""
        return [ELEPHANT, *(f"mouse-{number}" for number in range(1, self.mice + 1))]


@dataclass(slots=True)
class ClientResult:
    """What one client saw in one run.

    Attributes:
        name: ``elephant`` or ``mouse-<n>``.
        kind: ``elephant`` or ``mouse``.
        latencies: Seconds each served (200) request took.
        rejected: Requests answered 429.
        retry_after: Of those, the ones whose answer carried ``Retry-After``.
        failed: Requests that failed otherwise (other status or transport error).
    """

    name: str
    kind: Literal["elephant", "mouse"]
    latencies: list[float] = field(default_factory=list)
    rejected: int = 0
    retry_after: int = 0
    failed: int = 0

    @property
    def served(self) -> int:
        """Requests answered 200."""
        return len(self.latencies)


def new_results(options: LoadOptions) -> dict[str, ClientResult]:
    """Empty results for the clients of ``options``, by name."""
    return {
        name: ClientResult(name, "elephant" if name == ELEPHANT else "mouse")
        for name in options.client_names()
    }


@dataclass(frozen=True, slots=True)
class GeneratorReport:
    """How busy the load generator was during a run.

    Attributes:
        cpu_seconds: CPU time the generator's process spent on the load.
        wall_seconds: Wall-clock time the load took (the drain included).
        lag_p99: 99th percentile of how late the generator's event loop ran a 10 ms timer:
            CPU contention or a busy loop both show here, and delay every measured latency.
        lag_max: The largest of those delays.
        requests: Requests the generator sent, warm-up included.
    """

    cpu_seconds: float
    wall_seconds: float
    lag_p99: float
    lag_max: float
    requests: int

    @property
    def cpu_share(self) -> float:
        """CPU time over wall-clock time: 1.0 is one core busy all the time."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LoadRun:
    """One run's results by client, and how busy the generator was."""

    results: dict[str, ClientResult]
    generator: GeneratorReport


Progress = Callable[[float, dict[str, ClientResult]], None]


def apply_delta(results: dict[str, ClientResult], delta: dict[str, list[Any]]) -> None:
    """Add one progress line's ``{client: [latencies, rejected, retry_after, failed]}``."""
    for name, (latencies, rejected, retry_after, failed) in delta.items():
        result = results[name]
        result.latencies.extend(latencies)
        result.rejected += rejected
        result.retry_after += retry_after
        result.failed += failed


async def run_load(
    base_url: str, options: LoadOptions, progress: Progress | None = None
) -> LoadRun:
    """Drive one run of the demo's load against ``base_url`` from a generator process.

    Args:
        base_url: The server, ``http://127.0.0.1:<port>``.
        options: The load.
        progress: Called about four times a second with the elapsed seconds and the results
            so far.

    Returns:
        The results by client name (the elephant first, then the mice) and the generator's
        report.

    Raises:
        RuntimeError: If the generator fails or does not finish in time.
    """
    results = new_results(options)
    report: GeneratorReport | None = None
    command = [sys.executable, "-m", "apf_limiter._demo.generator", base_url]
    with tempfile.TemporaryFile() as errors:
        process = await asyncio.create_subprocess_exec(
            *command, json.dumps(asdict(options)), stdout=asyncio.subprocess.PIPE, stderr=errors
        )
        assert process.stdout is not None
        try:
            async with asyncio.timeout(options.duration + DRAIN_TIMEOUT + _EXIT_TIMEOUT):
                async for line in process.stdout:
                    message = json.loads(line)
                    apply_delta(results, message["clients"])
                    if "generator" in message:
                        report = GeneratorReport(**message["generator"])
                    elif progress is not None:
                        progress(message["elapsed"], results)
                await process.wait()
        except TimeoutError:
            raise RuntimeError("the load generator did not finish in time") from None
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if process.returncode != 0 or report is None:
            errors.seek(0)
            text = errors.read().decode("utf-8", "replace")
            raise RuntimeError(f"the load generator failed ({process.returncode}):\n{text}")
    return LoadRun(results, report)
