"""The aiohttp front door's added cost per request against a bare aiohttp server.

Three aiohttp servers on 127.0.0.1 in this one process and event loop, all serving the same
hello-world handler: **bare** (no middleware), **noop** (one do-nothing new-style middleware:
what aiohttp itself charges for any middleware), **admit** (a middleware around the engine
fast path alone, ``async with limiter.admit(digest)`` for the digest the front door builds)
and **apf** (``apf_limiter.aiohttp.setup`` with its defaults: the built-in configuration,
the two APF headers, the 60 s deadline). A
minimal client on a kept-alive connection sends one request at a time to each and reads the
whole response, in interleaved, rotated rounds (:mod:`benchmarks.interleave`): each server is
only ever compared with the bare one timed in the same round. The figure is the median time
per request (client and server together: one loop), its ratio to bare, and the µs added.

Run: ``python -m benchmarks.aiohttp_bench`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from apf_limiter import Limiter, RequestDigest
from apf_limiter.aiohttp import setup
from benchmarks.interleave import interleaved_samples, median_ratio
from benchmarks.result_file import write_result

DEFAULT_OUT = Path(__file__).parent / "results" / "aiohttp.json"
_REQUEST = b"GET /hello HTTP/1.1\r\nhost: bench\r\n\r\n"


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


@web.middleware
async def _noop(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    return response


def _admit(limiter: Limiter) -> Any:
    # The engine fast path alone, for the digest the front door builds for this request.
    digest = RequestDigest(verb="get", path="/hello", client="127.0.0.1")

    @web.middleware
    async def admit(request: web.Request, handler: Any) -> web.StreamResponse:
        async with limiter.admit(digest):
            response: web.StreamResponse = await handler(request)
        return response

    return admit


def make_app(variant: str) -> web.Application:
    """The hello-world application of one variant: ``bare``, ``noop``, ``admit`` or ``apf``."""
    middlewares = {"noop": [_noop], "admit": [_admit(Limiter())]}.get(variant, [])
    app = web.Application(middlewares=middlewares)
    if variant == "apf":
        setup(app)
    app.router.add_get("/hello", _hello)
    return app


class Client:
    """One kept-alive connection sending one request at a time (a minimal HTTP/1.1 reader)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def get(self) -> None:
        self.writer.write(_REQUEST)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected response: {head[:80]!r}")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, sock.getsockname()[1]


async def measure(rounds: int, n: int) -> dict[str, dict[str, float]]:
    """Per variant: median µs per request, median ratio to bare, µs added to bare."""
    runners: list[web.AppRunner] = []
    bodies: dict[str, Callable[[], Awaitable[None]]] = {}
    try:
        for variant in ("bare", "noop", "admit", "apf"):
            runner, port = await _serve(make_app(variant))
            runners.append(runner)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            bodies[variant] = Client(reader, writer).get
        samples = await interleaved_samples(bodies, rounds, n)
    finally:
        for runner in runners:
            await runner.cleanup()
    bare = samples["bare"]
    return {
        name: {
            "us": statistics.median(times) * 1e6,
            "ratio": median_ratio(times, bare),
            "added_us": statistics.median(t - b for t, b in zip(times, bare, strict=True)) * 1e6,
        }
        for name, times in samples.items()
    }


def main() -> None:
    """Measure and print the table; write the result file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 rounds of 300")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    rounds, n = (3, 300) if args.quick else (9, 4_000)
    result = asyncio.run(measure(rounds, n))
    print(f"{rounds} interleaved rounds of {n} sequential requests per variant")
    for name, row in result.items():
        print(
            f"   {name:6s} {row['us']:8.1f} µs/request   {row['ratio']:5.3f}x bare   "
            f"+{row['added_us']:6.1f} µs"
        )
    write_result(
        {"rounds": rounds, "n": n, "variants": result},
        args.out,
        default=DEFAULT_OUT,
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
