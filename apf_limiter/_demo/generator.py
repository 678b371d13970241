"""The demo's load generator, a process of its own: one elephant flooding, a few mice.

Run as ``python -m apf_limiter._demo.generator http://127.0.0.1:PORT '<LoadOptions as JSON>'``
(:func:`apf_limiter._demo.load.run_load` does). Every client has its own keep-alive
connections (:mod:`apf_limiter._demo.client`): the elephant one per request it keeps in
flight; a mouse one. Told 429, the elephant tries again after a short pause (a flood ignores
``Retry-After``). Each mouse sends one request, then waits about ``mouse_interval`` seconds.
Only requests started after the warm-up and before the end count; the run stops starting
requests at its end and waits for those in flight.

Standard output carries one JSON line four times a second, ``{"elapsed": s, "clients": {name:
[new latencies, new 429s, new 429s with Retry-After, new failures]}}``, and a last one with
``"generator"``: the CPU time the process spent, the wall-clock time, and how late its event
loop ran a 10 ms timer (see :class:`~apf_limiter._demo.load.GeneratorReport`).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

from apf_limiter._demo.client import Connection, encode_get
from apf_limiter._demo.load import (
    DRAIN_TIMEOUT,
    ELEPHANT,
    GeneratorReport,
    LoadOptions,
)

_ELEPHANT_RETRY_PAUSE = 0.2
_LAG_TICK = 0.01
_REPORT_EVERY = 0.25


class _Tally:
    """One client's counts since the last progress line."""

    __slots__ = ("failed", "latencies", "rejected", "retry_after")

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.rejected = 0
        self.retry_after = 0
        self.failed = 0

    def take(self) -> list[Any]:
        """The counts as a progress line carries them; starts counting afresh."""
        taken = [self.latencies, self.rejected, self.retry_after, self.failed]
        self.latencies = []
        self.rejected = self.retry_after = self.failed = 0
        return taken


class _Run:
    def __init__(self, options: LoadOptions, host: str, port: int) -> None:
        self.options = options
        self.host = host
        self.port = port
        self.tallies = {name: _Tally() for name in options.client_names()}
        self.requests = 0
        now = time.perf_counter()
        self.started = now
        self.counted_from = now + options.warmup
        self.end = now + options.duration

    def connection(self, name: str) -> Connection:
        request = encode_get(self.host, self.port, "/work", {"authorization": f"Bearer {name}"})
        return Connection(self.host, self.port, request)

    async def request(self, connection: Connection, tally: _Tally) -> bool:
        """Send one request; returns whether it was rejected with 429."""
        self.requests += 1
        started = time.perf_counter()
        try:
            status, retry_after = await connection.get()
        except OSError:
            status, retry_after = 0, False
        finished = time.perf_counter()
        if self.options.generator_burn > 0:
            _burn(self.options.generator_burn)
        if started < self.counted_from:
            return status == 429
        if status == 200:
            tally.latencies.append(finished - started)
        elif status == 429:
            tally.rejected += 1
            tally.retry_after += retry_after
        else:
            tally.failed += 1
            if status == 0:
                # Do not spin on a refused connection.
                await asyncio.sleep(_ELEPHANT_RETRY_PAUSE)
        return status == 429

    async def elephant(self) -> None:
        connection = self.connection(ELEPHANT)
        tally = self.tallies[ELEPHANT]
        try:
            while time.perf_counter() < self.end:
                if await self.request(connection, tally):
                    await asyncio.sleep(_ELEPHANT_RETRY_PAUSE)
        finally:
            connection.close()

    async def mouse(self, name: str, seed: int) -> None:
        connection = self.connection(name)
        tally = self.tallies[name]
        jitter = random.Random(seed)
        interval = self.options.mouse_interval
        try:
            # Mice start spread out, so they do not all arrive in step.
            await asyncio.sleep(jitter.uniform(0, interval))
            while time.perf_counter() < self.end:
                await self.request(connection, tally)
                await asyncio.sleep(interval * jitter.uniform(0.5, 1.5))
        finally:
            connection.close()

    def delta(self) -> dict[str, list[Any]]:
        return {name: tally.take() for name, tally in self.tallies.items()}


def _burn(seconds: float) -> None:
    """Keep the CPU busy for ``seconds`` of this process's CPU time (a starved generator)."""
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


async def _measure_lag(lags: list[float]) -> None:
    """Record how late the event loop runs a ``_LAG_TICK`` timer, until cancelled."""
    while True:
        due = time.perf_counter() + _LAG_TICK
        await asyncio.sleep(_LAG_TICK)
        lags.append(max(0.0, time.perf_counter() - due))


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def generate(base_url: str, options: LoadOptions) -> None:
    """Run the load against ``base_url``, writing progress and the report to standard output."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    cpu_started = time.process_time()
    run = _Run(options, host, port)
    lags: list[float] = []
    lag_task = asyncio.create_task(_measure_lag(lags))
    tasks = [asyncio.create_task(run.elephant()) for _ in range(options.elephant_concurrency)]
    tasks += [
        asyncio.create_task(run.mouse(name, options.seed + index))
        for index, name in enumerate(options.client_names()[1:], 1)
    ]
    everything = asyncio.gather(*tasks)
    while not everything.done():
        await asyncio.wait([everything], timeout=_REPORT_EVERY)
        elapsed = time.perf_counter() - run.started
        if elapsed > options.duration + DRAIN_TIMEOUT:
            everything.cancel()
            break
        _emit({"elapsed": min(elapsed, options.duration), "clients": run.delta()})
    await asyncio.wait([everything])  # settled, cancelled by the drain limit or not
    lag_task.cancel()
    if not everything.cancelled() and (error := everything.exception()) is not None:
        raise error  # a bug, not a server's answer: the command reports the traceback
    wall = time.perf_counter() - run.started
    lags.sort()
    report = GeneratorReport(
        cpu_seconds=time.process_time() - cpu_started,
        wall_seconds=wall,
        lag_p99=lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0,
        lag_max=lags[-1] if lags else 0.0,
        requests=run.requests,
    )
    _emit({"elapsed": options.duration, "clients": run.delta(), "generator": asdict(report)})


def main(argv: Sequence[str] | None = None) -> int:
    """``BASE_URL OPTIONS_JSON``: run one load and exit."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if len(arguments) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, options = arguments
    asyncio.run(generate(base_url, LoadOptions(**json.loads(options))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
