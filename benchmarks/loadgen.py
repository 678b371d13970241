"""Loopback load generators for the HTTP benchmarks: ``wrk``, or a bounded Python generator.

* :func:`run_wrk` runs Debian's ``wrk`` (``apt-get install wrk``) and parses its report.
* :func:`run_python` is the fallback: asyncio protocols on raw sockets, ``connections``
  keep-alive connections each with one request in flight, for a fixed duration. It parses only
  the status line and ``content-length``, so that it stays cheaper than the server it drives.
* :func:`generator_ceiling` measures what the Python generator itself can do, against a
  server that answers every request with the same canned bytes (``python -m
  benchmarks.loadgen --canned-server --fd N``): a benchmark driven by it is bounded by it only
  if the app's throughput comes near this ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks.servers import REPO_ROOT

__all__ = [
    "LoadResult",
    "generator_ceiling",
    "response_head",
    "run_load",
    "run_python",
    "run_wrk",
    "wrk_path",
]

_CANNED = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 13\r\n\r\nHello, world!"


@dataclass(slots=True)
class LoadResult:
    """What one load run measured.

    Attributes:
        generator: ``wrk`` or ``python``.
        seconds: The measured duration.
        responses: Complete responses received.
        statuses: Responses by status code (the Python generator; ``wrk`` reports non-2xx).
        non_2xx: Responses that were not 2xx or 3xx.
        errors: Transport errors (connect, read, write, timeout).
        latency_p50: Median latency in seconds (``nan`` if not measured).
        latency_p99: 99th percentile latency in seconds.
    """

    generator: str
    seconds: float
    responses: int
    statuses: dict[int, int] = field(default_factory=dict)
    non_2xx: int = 0
    errors: int = 0
    latency_p50: float = float("nan")
    latency_p99: float = float("nan")

    @property
    def rps(self) -> float:
        """Responses per second."""
        return self.responses / self.seconds if self.seconds > 0 else 0.0


def wrk_path() -> str | None:
    """The ``wrk`` executable, if installed."""
    return shutil.which("wrk")


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        return float("nan")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> LoadResult:
    """Parse ``wrk --latency``'s report."""
    requests = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", output)
    if requests is None:
        raise RuntimeError(f"cannot parse wrk's output:\n{output}")
    seconds = _seconds(requests.group(2) + requests.group(3))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.MULTILINE)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.MULTILINE)
    return LoadResult(
        generator="wrk",
        seconds=seconds,
        responses=int(requests.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(n) for n in errors.groups()) if errors else 0,
        latency_p50=_seconds(p50.group(1)) if p50 else float("nan"),
        latency_p99=_seconds(p99.group(1)) if p99 else float("nan"),
    )


def run_wrk(url: str, *, connections: int, duration: float, threads: int = 1) -> LoadResult:
    """Run ``wrk`` against ``url`` for ``duration`` seconds (it stops by itself)."""
    executable = wrk_path()
    if executable is None:
        raise RuntimeError("wrk is not installed")
    command = [
        executable,
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={max(1, round(duration))}s",
        "--timeout=10s",
        "--latency",
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=duration + 30)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}):\n{done.stderr}")
    return parse_wrk(done.stdout)


def response_head(head: bytes) -> tuple[int, dict[bytes, bytes]]:
    """A response head (without its blank line): the status and the headers, names lowercased.

    A repeated header keeps its last value; the benchmarks' servers repeat none they read.
    """
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(head[9:12]), headers


class _Connection(asyncio.Protocol):
    """One keep-alive connection sending ``request`` again as soon as a response is complete."""

    def __init__(self, request: bytes, stats: _Stats) -> None:
        self.request = request
        self.stats = stats
        self.buffer = b""
        self.header_end = -1
        self.needed = 0
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        if time.perf_counter() >= self.stats.stop_at:
            self.transport.close()
            return
        self.sent_at = time.perf_counter()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.header_end < 0:
                self.header_end = self.buffer.find(b"\r\n\r\n")
                if self.header_end < 0:
                    return
                head = self.buffer[: self.header_end].lower()
                length = re.search(rb"\r\ncontent-length:\s*(\d+)", head)
                self.needed = self.header_end + 4 + (int(length.group(1)) if length else 0)
            if len(self.buffer) < self.needed:
                return
            status = int(self.buffer[9:12])
            self.buffer = self.buffer[self.needed :]
            self.header_end = -1
            now = time.perf_counter()
            if now <= self.stats.stop_at:
                self.stats.record(status, now - self.sent_at)
            self._send()
            if not self.buffer:
                return

    def connection_lost(self, exc: Exception | None) -> None:
        if time.perf_counter() < self.stats.stop_at:
            self.stats.errors += 1
        if not self.closed.done():
            self.closed.set_result(None)


@dataclass(slots=True)
class _Stats:
    stop_at: float
    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    def record(self, status: int, latency: float) -> None:
        self.statuses[status] += 1
        self.latencies.append(latency)


def _request(host: str, port: int, path: str, headers: Sequence[tuple[str, str]]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"host: {host}:{port}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _run_python(
    host: str,
    port: int,
    path: str,
    connections: int,
    duration: float,
    headers: Sequence[tuple[str, str]],
) -> LoadResult:
    loop = asyncio.get_running_loop()
    request = _request(host, port, path, headers)
    started = time.perf_counter()
    stats = _Stats(stop_at=started + duration)
    protocols: list[_Connection] = []
    for _ in range(connections):
        try:
            _, protocol = await loop.create_connection(
                lambda: _Connection(request, stats), host, port
            )
        except OSError:
            stats.errors += 1
            continue
        protocols.append(protocol)
    # Every connection stops by itself once the duration is over; bound the drain anyway.
    await asyncio.wait([p.closed for p in protocols], timeout=duration + 15)
    for protocol in protocols:
        if protocol.transport is not None:
            protocol.transport.abort()
    ordered = sorted(stats.latencies)
    responses = len(ordered)
    return LoadResult(
        generator="python",
        seconds=duration,
        responses=responses,
        statuses=dict(stats.statuses),
        non_2xx=sum(n for status, n in stats.statuses.items() if not 200 <= status < 400),
        errors=stats.errors,
        latency_p50=ordered[responses // 2] if ordered else float("nan"),
        latency_p99=ordered[min(responses - 1, int(responses * 0.99))] if ordered else float("nan"),
    )


def run_python(
    host: str,
    port: int,
    *,
    path: str = "/",
    connections: int,
    duration: float,
    headers: Sequence[tuple[str, str]] = (),
) -> LoadResult:
    """Drive ``connections`` keep-alive connections for ``duration`` seconds (Python)."""
    return asyncio.run(_run_python(host, port, path, connections, duration, headers))


def run_load(
    generator: str, host: str, port: int, *, connections: int, duration: float, threads: int = 1
) -> LoadResult:
    """Run ``wrk`` or the Python generator against ``GET /``."""
    if generator == "wrk":
        return run_wrk(
            f"http://{host}:{port}/", connections=connections, duration=duration, threads=threads
        )
    return run_python(host, port, connections=connections, duration=duration)


def generator_ceiling(*, connections: int, duration: float) -> LoadResult:
    """What the Python generator achieves against a canned-response server (its ceiling)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(2048)
    port = listener.getsockname()[1]
    command = [sys.executable, "-m", "benchmarks.loadgen", "--canned-server", "--fd"]
    process = subprocess.Popen(
        [*command, str(listener.fileno())], cwd=REPO_ROOT, pass_fds=(listener.fileno(),)
    )
    listener.close()
    try:
        time.sleep(0.5)
        return run_python("127.0.0.1", port, connections=connections, duration=duration)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class _Canned(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(_CANNED * data.count(b"\r\n\r\n"))


async def _serve_canned(fd: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Canned, sock=socket.socket(fileno=fd))
    async with server:
        await server.serve_forever()


def main() -> None:
    """``--canned-server --fd N``: answer every request with the same bytes until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--canned-server", action="store_true", required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(_serve_canned(args.fd))


if __name__ == "__main__":
    main()
