"""Long run: a million requests through APFMiddleware on a real server, nothing may leak.

Run: ``.venv/bin/python -m benchmarks.long_run`` (``make soak``; ``--quick`` for 20,000
requests). Not part of ``make test``: it takes minutes.

A uvicorn server (a child process, :func:`benchmarks.bench_app.soak`: APF with 4 seats, fair
per user, 2 requests per queue, a 50 ms wait limit) is driven by ``--connections`` closed-loop
clients on 127.0.0.1 with a seeded mix of requests: immediate answers, short sleeps (so that
requests queue), handler exceptions before and after the response started, and client
disconnects — the socket closed or reset right after sending, or a little later, so some
leave while queued and some while executing. Half of the requests come from one heavy user,
so its queues fill and it also gets ``429`` (queue full, or wait limit passed).

Checks, at the end (exit status 1 if one fails):

* no leaked seat: the server's limiter has 0 executing and 0 waiting requests and seats once
  the load stopped (``/_bench/stats``, served outside the limiter);
* RSS growth < 5 %: the server's peak RSS over the last 10 % of the requests against its
  peak over the first 10 % (sampled every 0.25 s with psutil); a window without a sample
  (a run too short to sample) fails the check rather than passing unmeasured;
* the run completed: all ``--requests`` were sent before ``--max-seconds`` ran out.

The run is bounded: it stops after ``--requests`` requests or ``--max-seconds`` seconds.
The results go to ``benchmarks/results/long_run.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_app import build_info
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT, Server, fetch_json, running_server

__all__ = ["main", "rss_growth", "run"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "long_run.json"
RSS_GROWTH_MAX = 0.05
_READ_TIMEOUT = 30.0
# Sleeps of up to 20 ms make the 4 seats, not the server's CPU, the bottleneck: requests queue.
_MAX_SLEEP_US = 20_000
_SETTLE_TIMEOUT = 15.0

# (weight, kind): what a client sends next.
_MIX: list[tuple[int, str]] = [
    (55, "ok"),
    (25, "sleep"),
    (3, "boom"),
    (2, "boom-mid"),
    (15, "disconnect"),
]
_KINDS = [kind for _, kind in _MIX]
_WEIGHTS = [weight for weight, _ in _MIX]


@dataclass(slots=True)
class _Progress:
    target: int
    deadline: float
    issued: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[int, float, int]] = field(default_factory=list)  # (done, t, rss)
    stats_at_10pct: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    def next_request(self) -> bool:
        if self.issued >= self.target or time.monotonic() >= self.deadline:
            return False
        self.issued += 1
        return True


def _request(kind: str, user: str, stream: random.Random) -> bytes:
    if kind in ("sleep", "disconnect"):
        path = f"/sleep?us={stream.randrange(0, _MAX_SLEEP_US)}"
    elif kind == "ok":
        path = "/ok"
    else:
        path = f"/{kind}"
    return f"GET {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {user}\r\n\r\n".encode()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one response; returns its status and whether the server will close."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length, close = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    await reader.readexactly(length)
    return status, close


async def _client(host: str, port: int, number: int, progress: _Progress) -> None:
    stream = random.Random(f"long-run/{number}")
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    try:
        while progress.next_request():
            kind = stream.choices(_KINDS, _WEIGHTS)[0]
            user = "heavy" if stream.random() < 0.5 else f"user-{stream.randrange(16)}"
            if writer is None or reader is None:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(_request(kind, user, stream))
            if kind == "disconnect":
                delay = 0.0 if stream.random() < 0.4 else stream.uniform(0, 0.003)
                await asyncio.sleep(delay)
                if stream.random() < 0.5:
                    writer.close()  # FIN: the server sees the client leave
                else:
                    writer.transport.abort()  # RST
                reader = writer = None
                progress.outcomes["disconnected"] += 1
                continue
            try:
                status, close = await asyncio.wait_for(_read_response(reader), _READ_TIMEOUT)
            except (asyncio.IncompleteReadError, ConnectionError):
                # /boom-mid breaks the response on purpose; anything else is unexpected.
                progress.outcomes["broken" if kind == "boom-mid" else "unexpected-broken"] += 1
                writer.close()
                reader = writer = None
                continue
            expected = {"boom": 500, "boom-mid": -1}.get(kind, 200)
            if status == 429:
                progress.outcomes["rejected-429"] += 1
            elif status == expected:
                progress.outcomes[f"status-{status}"] += 1
            else:
                progress.outcomes[f"unexpected-{kind}-{status}"] += 1
            if close:
                writer.close()
                reader = writer = None
    finally:
        if writer is not None:
            writer.close()


async def _sample(server: Server, process: Any, progress: _Progress, stop: asyncio.Event) -> None:
    started = time.monotonic()
    last_print = started
    while not stop.is_set():
        progress.samples.append(
            (progress.done, time.monotonic() - started, process.memory_info().rss)
        )
        if not progress.stats_at_10pct and progress.done >= 0.1 * progress.target:
            progress.stats_at_10pct = await asyncio.to_thread(
                fetch_json, server.host, server.port, "/_bench/stats?gc=1"
            )
        now = time.monotonic()
        if now - last_print >= 10:
            last_print = now
            rate = progress.done / (now - started)
            print(
                f"  {progress.done:,} requests, {rate:,.0f}/s, server RSS "
                f"{progress.samples[-1][2] / 2**20:.1f} MiB",
                flush=True,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)


async def _drive(server: Server, requests: int, connections: int, max_seconds: float) -> _Progress:
    progress = _Progress(target=requests, deadline=time.monotonic() + max_seconds)
    import psutil  # type: ignore[import-untyped]  # the bench extra; not needed to import this

    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample(server, psutil.Process(server.pid), progress, stop))
    clients = [
        asyncio.create_task(_client(server.host, server.port, n, progress))
        for n in range(connections)
    ]
    try:
        await asyncio.gather(*clients)
    finally:
        for client in clients:
            client.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        stop.set()
        await sampler
    return progress


def _window_peak(samples: list[tuple[int, float, int]], low: float, high: float) -> int | None:
    inside = [rss for done, _, rss in samples if low <= done <= high]
    return max(inside) if inside else None


def rss_growth(
    samples: list[tuple[int, float, int]], done: int
) -> tuple[int | None, int | None, float]:
    """Peak RSS over the first and the last 10 % of ``done`` requests, and the growth.

    Args:
        samples: ``(requests done, seconds, RSS bytes)`` samples, in order.
        done: Requests done in the whole run.

    Returns:
        The two peaks (``None`` for a window without a sample) and the relative growth from
        the first to the last, NaN unless both were measured: a NaN fails the check.
    """
    first = _window_peak(samples, 0, 0.1 * done)
    last = _window_peak(samples, 0.9 * done, done)
    if not first or last is None:
        return first, last, math.nan
    return first, last, (last - first) / first


def _settled_stats(server: Server) -> dict[str, Any]:
    deadline = time.monotonic() + _SETTLE_TIMEOUT
    while True:
        stats = fetch_json(server.host, server.port, "/_bench/stats?gc=1")
        busy = stats["executing_requests"] or stats["waiting_requests"]
        if not busy or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


def run(
    *, requests: int, connections: int, max_seconds: float, capacity: int, wait_limit: float
) -> dict[str, Any]:
    """Run the long run; returns the measurements and the verdicts."""
    env = {"APF_BENCH_CAPACITY": str(capacity), "APF_BENCH_WAIT_LIMIT": str(wait_limit)}
    started = time.monotonic()
    with running_server("soak", "soak", env=env, log_level="critical") as server:
        print(
            f"Server build: {server.info['build']} ({server.info['queueset_file']}), "
            f"uvicorn {server.info['uvicorn']}, pid {server.pid}",
            flush=True,
        )
        baseline = fetch_json(server.host, server.port, "/_bench/stats?gc=1")
        progress = asyncio.run(_drive(server, requests, connections, max_seconds))
        elapsed = time.monotonic() - started
        final = _settled_stats(server)
    done = progress.done
    first, last, growth = rss_growth(progress.samples, done)
    leaked = {
        key: final[key]
        for key in ("executing_requests", "executing_seats", "waiting_requests", "waiting_seats")
        if final[key] != 0
    }
    unexpected = {k: v for k, v in progress.outcomes.items() if k.startswith("unexpected")}
    return {
        "build": build_info(),
        "server_build": server.info,
        "requests_target": requests,
        "requests_done": done,
        "stopped_by_time_limit": done < requests,
        "seconds": elapsed,
        "rate": done / elapsed if elapsed else 0.0,
        "connections": connections,
        "capacity": capacity,
        "wait_limit": wait_limit,
        "outcomes": dict(progress.outcomes),
        "server_stats_before": baseline,
        "server_stats_at_10pct": progress.stats_at_10pct,
        "server_stats_after": final,
        "rss_first_10pct_peak": first,
        "rss_last_10pct_peak": last,
        "rss_growth": growth,
        "rss_samples": progress.samples,
        "checks": {
            "no_leaked_seat": not leaked,
            "leaked": leaked,
            "rss_growth_below_5pct": growth < RSS_GROWTH_MAX,  # False for NaN (unmeasured)
            "no_unexpected_outcome": not unexpected,
            "completed": done >= requests,
        },
    }


def report(result: dict[str, Any]) -> str:
    """A readable summary of the run and its checks."""
    after = result["server_stats_after"]
    before = result["server_stats_before"]
    checks = result["checks"]
    outcomes = ", ".join(f"{k} {v:,}" for k, v in sorted(result["outcomes"].items()))
    lines = [
        f"{result['requests_done']:,} requests in {result['seconds']:.0f} s "
        f"({result['rate']:,.0f}/s, {result['connections']} connections)"
        + (" -- stopped by the time limit" if result["stopped_by_time_limit"] else ""),
        f"Client outcomes: {outcomes}",
        f"Server limiter: dispatched {after['dispatched']:,}, rejected {after['rejected']:,} "
        f"(timed out {after['timed_out']:,}), cancelled {after['cancelled']:,}",
        f"After the run: executing {after['executing_requests']} requests / "
        f"{after['executing_seats']} seats, waiting {after['waiting_requests']} / "
        f"{after['waiting_seats']} -> "
        + ("no leaked seat" if checks["no_leaked_seat"] else f"LEAK {checks['leaked']}"),
        f"Server RSS peak: first 10% {_mib(result['rss_first_10pct_peak'])}, last 10% "
        f"{_mib(result['rss_last_10pct_peak'])} -> growth {result['rss_growth']:+.2%} ("
        + _rss_verdict(result["rss_growth"], checks["rss_growth_below_5pct"])
        + f", limit {RSS_GROWTH_MAX:.0%})",
        f"Live objects in the server (after gc): {before['gc_objects']:,} at the start, "
        f"{result['server_stats_at_10pct'].get('gc_objects', 0):,} at 10%, "
        f"{after['gc_objects']:,} at the end",
    ]
    if not checks["no_unexpected_outcome"]:
        lines.append("Unexpected outcomes: see above (unexpected-*)")
    if not checks["completed"]:
        lines.append("INCOMPLETE: the time limit stopped the run (a failed check)")
    return "\n".join(lines)


def _mib(rss: int | None) -> str:
    return "no sample" if rss is None else f"{rss / 2**20:.1f} MiB"


def _rss_verdict(growth: float, ok: bool) -> str:
    if math.isnan(growth):
        return "NOT MEASURED: a window has no RSS sample; run longer"
    return "ok" if ok else "TOO MUCH"


def main() -> int:
    """Parse options, run, print the report, write the JSON file; 1 if a check failed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests to send")
    parser.add_argument("--connections", type=int, default=32, help="client connections")
    parser.add_argument("--max-seconds", type=float, default=2400, help="time limit")
    parser.add_argument("--capacity", type=int, default=4, help="seats of the server")
    parser.add_argument("--wait-limit", type=float, default=0.05, help="seconds in a queue")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    parser.add_argument("--quick", action="store_true", help="20,000 requests")
    args = parser.parse_args()
    if args.quick:
        args.requests = 20_000
    result = run(
        requests=args.requests,
        connections=args.connections,
        max_seconds=args.max_seconds,
        capacity=args.capacity,
        wait_limit=args.wait_limit,
    )
    print(report(result))
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick, indent=None)
    checks = result["checks"]
    return 0 if all(v for k, v in checks.items() if k != "leaked") else 1


if __name__ == "__main__":
    raise SystemExit(main())
