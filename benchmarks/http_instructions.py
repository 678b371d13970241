"""HTTP cost per request, counted: uvicorn's own protocol driven in-process, no sockets, no wrk.

Run: ``.venv/bin/python -m benchmarks.http_instructions`` (``--quick`` for a smoke test).

``http_bench`` measures throughput over loopback, which on two shared cores swings by ±20%
between rounds. This script removes the noise: it feeds raw HTTP/1.1 requests into uvicorn's
protocol class (``h11``, and ``httptools`` when installed) over a fake transport, in one
process, so that every request goes through the server's parser and serializer, the ASGI
cycle task and the application, exactly as under load, and nothing else runs.

Two measurements per variant, each a ratio to ``bare`` measured in the same run:

* **instructions per request** under ``valgrind --tool=callgrind`` (when installed): two runs
  of different lengths, their difference divided by the extra requests, so start-up cancels
  out. Deterministic: the same build gives the same count whatever else the machine does.
* **time per request**: interleaved rounds of the same driver without valgrind; the ratio is
  the median of the per-round ratios.

The variants are those of :mod:`benchmarks.http_bench` plus two controls:
``bare-2-headers`` (the bare app answering with the two headers APF adds — what the headers
alone cost the server) and ``raw``/``raw-apf`` (a plain ASGI callable, no Starlette).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import ASGIApp, Receive, Scope, Send
from benchmarks import bench_app
from benchmarks.bench_app import build_info
from benchmarks.callgrind import instructions_per_operation
from benchmarks.http_bench import machine
from benchmarks.result_file import write_result

__all__ = ["VARIANTS", "drive", "main", "protocols", "run_variant"]

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: bench\r\n\r\n"
BODY = b"Hello, world!"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "http_instructions.json"


async def _raw(scope: Scope, receive: Receive, send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(BODY)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": BODY})


def _hello_with_apf_headers() -> ASGIApp:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    # The names and values APFMiddleware adds for an anonymous request (built-in config).
    headers = {"x-apf-flow-schema": "anonymous", "x-apf-priority-level": "workload-low"}

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse(BODY.decode(), headers=headers)

    return Starlette(routes=[Route("/", hello)])


#: Variant name -> application factory.
VARIANTS: dict[str, Callable[[], ASGIApp]] = {
    "bare": bench_app.hello_bare,
    "apf": bench_app.hello_apf,
    "apf-no-headers": bench_app.hello_apf_no_headers,
    "semaphore": bench_app.hello_semaphore,
    "bare-2-headers": _hello_with_apf_headers,
    "raw": lambda: _raw,
    "raw-apf": lambda: APFMiddleware(_raw),
}
DEFAULT_VARIANTS = ("bare", "apf", "apf-no-headers", "semaphore", "bare-2-headers")


def protocols() -> list[str]:
    """The uvicorn HTTP implementations installed here (``h11`` always)."""
    return ["h11"] + (["httptools"] if find_spec("httptools") else [])


class _Transport(asyncio.Transport):
    """Swallows the response; wakes the client when a whole response has been written."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self._port = port
        self.done: asyncio.Future[None] | None = None
        self.responses = 0
        self.first_response = b""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", self._port)}.get(
            name, default
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.first_response:
            self.first_response = bytes(data)
        elif self.first_response.endswith(b"\r\n\r\n"):
            self.first_response += bytes(data)  # the body, written after the head
        if bytes(data).endswith(BODY):
            self.responses += 1
            if self.done is not None and not self.done.done():
                self.done.set_result(None)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Driver:
    """One application served by one uvicorn protocol instance per keep-alive connection."""

    def __init__(self, app: ASGIApp, protocol: str, connections: int) -> None:
        from uvicorn.config import Config
        from uvicorn.server import ServerState

        if protocol == "httptools":
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Protocol
        else:
            from uvicorn.protocols.http.h11_impl import H11Protocol as Protocol  # type: ignore[assignment]
        config = Config(app, http=protocol, loop="asyncio", access_log=False, lifespan="off")
        config.load()
        loop = asyncio.get_running_loop()
        state = ServerState()
        self.connections: list[tuple[Any, _Transport]] = []
        for index in range(connections):
            server = Protocol(config, state, {}, loop)
            transport = _Transport(40000 + index)
            server.connection_made(transport)
            self.connections.append((server, transport))

    async def run(self, requests: int) -> None:
        """Send ``requests`` requests, spread over the connections, one at a time on each."""
        loop = asyncio.get_running_loop()
        per_connection = max(1, requests // len(self.connections))

        async def client(server: Any, transport: _Transport) -> None:
            for _ in range(per_connection):
                transport.done = loop.create_future()
                server.data_received(REQUEST)
                await transport.done

        await asyncio.gather(*(client(s, t) for s, t in self.connections))

    @property
    def responses(self) -> int:
        """Complete responses written so far."""
        return sum(t.responses for _, t in self.connections)

    @property
    def first_response(self) -> bytes:
        """The first response of the first connection, head and body."""
        return self.connections[0][1].first_response


async def drive(
    variant: str, protocol: str, requests: int, *, connections: int = 8, warmup: int = 400
) -> _Driver:
    """Serve ``warmup`` then ``requests`` requests of ``variant`` in-process; return the driver."""
    driver = _Driver(VARIANTS[variant](), protocol, connections)
    await driver.run(warmup)
    await driver.run(requests)
    return driver


def _time_rounds(
    variants: list[str], protocol: str, requests: int, rounds: int
) -> dict[str, list[float]]:
    async def measure() -> dict[str, list[float]]:
        drivers = {v: _Driver(VARIANTS[v](), protocol, 8) for v in variants}
        for driver in drivers.values():
            await driver.run(400)
        times: dict[str, list[float]] = {v: [] for v in variants}
        for round_ in range(rounds):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for variant in order:
                started = time.perf_counter()
                await drivers[variant].run(requests)
                times[variant].append((time.perf_counter() - started) / requests * 1e6)
        return times

    return asyncio.run(measure())


def run_variant(variant: str, protocol: str, short: int, long: int) -> float:
    """Instructions per request of ``variant`` (difference of a long and a short run)."""
    command = [sys.executable, "-m", "benchmarks.http_instructions", "--serve", variant]
    return instructions_per_operation(
        [*command, "--protocol", protocol],
        "--requests",
        short,
        long,
        Path(__file__).resolve().parent.parent,
    )


def _ratios(values: dict[str, float], higher_is_better: bool) -> dict[str, float]:
    base = values["bare"]
    return {v: (x / base if higher_is_better else base / x) for v, x in values.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure, print the tables, write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # one callgrind child run
    parser.add_argument("--protocol", default=None, help="h11 or httptools (default: each)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per timing round")
    parser.add_argument("--rounds", type=int, default=15, help="timing rounds")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--no-callgrind", action="store_true", help="timing only")
    parser.add_argument("--quick", action="store_true", help="a smoke test (~1 min)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(drive(args.serve, args.protocol or "h11", args.requests))
        return {}
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown or "bare" not in variants:
        parser.error(f"variants must include bare and come from {sorted(VARIANTS)}")
    rounds, requests = (3, 1000) if args.quick else (args.rounds, args.requests)
    short, long = (200, 600) if args.quick else (400, 2400)
    use_callgrind = not args.no_callgrind and shutil.which("valgrind") is not None
    report: dict[str, Any] = {
        "machine": machine(),
        "build": build_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "requests_per_round": requests,
        "rounds": rounds,
        "callgrind_requests": [short, long] if use_callgrind else None,
        "protocols": {},
    }
    print(f"build: {report['build']['build']}; variants: {', '.join(variants)}")
    for protocol in [args.protocol] if args.protocol else protocols():
        times = _time_rounds(variants, protocol, requests, rounds)
        medians = {v: statistics.median(t) for v, t in times.items()}
        # Each round's ratio against the bare app of the same round, then the median: the
        # machine's speed drifts between rounds, much less within one.
        per_round = {
            v: [b / x for b, x in zip(times["bare"], t, strict=True)] for v, t in times.items()
        }
        result: dict[str, Any] = {
            "us_per_request": times,
            "us_median": medians,
            "time_ratio_per_round": per_round,
            "time_ratio_to_bare": {v: statistics.median(r) for v, r in per_round.items()},
        }
        if use_callgrind:
            # Two at a time: callgrind counts instructions, so sharing the cores is harmless.
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {v: pool.submit(run_variant, v, protocol, short, long) for v in variants}
                counts = {v: future.result() for v, future in futures.items()}
            result["instructions_per_request"] = counts
            result["instruction_ratio_to_bare"] = _ratios(counts, higher_is_better=False)
        report["protocols"][protocol] = result
        print(f"\nuvicorn --http {protocol}   (ratio = bare cost / variant cost: throughput)")
        header = f"{'variant':16} {'µs/req':>8} {'ratio':>6}"
        print(header + (f" {'instr/req':>10} {'ratio':>6}" if use_callgrind else ""))
        for v in variants:
            line = f"{v:16} {medians[v]:8.1f} {result['time_ratio_to_bare'][v]:6.3f}"
            if use_callgrind:
                line += (
                    f" {result['instructions_per_request'][v]:10.0f}"
                    f" {result['instruction_ratio_to_bare'][v]:6.3f}"
                )
            print(line)
    write_result(report, args.out, default=DEFAULT_OUT, quick=args.quick, indent=2)
    return report


if __name__ == "__main__":
    main()
