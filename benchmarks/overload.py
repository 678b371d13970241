"""Goodput under overload: a 20-slot pool driven open-loop at 1×–10× its capacity, side by side.

Run: ``.venv/bin/python -m benchmarks.overload`` (~5 min; ``--quick`` for a smoke test).

The service (:mod:`benchmarks.bench_app`'s ``pool_*`` apps under uvicorn): ``GET /work?ms=H``
holds one connection of a simulated database pool of 20 for ``H`` ms (``--hold-ms``, 200 by
default: the issue's 50 ms, 400 req/s, makes the server and this generator share two cores
with 4,000 arrivals a second at 10×, which a busy machine does not keep up with), so its
capacity is ``20 / H`` requests per second. Open-loop clients (arrivals on a Poisson schedule,
whatever the answers) offer 1×, 2×, 5× and 10× that capacity as one flood flow
(``Bearer flood``), and beside it 40 mice (``Bearer mouse-N``, together 10% of the capacity);
every client gives up after ``--timeout`` seconds (2 s). The contenders, each a fresh server
per run, interleaved:

* ``bare`` — the pool alone (its own FIFO line, unbounded);
* ``semaphore`` — behind a FIFO :class:`asyncio.Semaphore` of 20 (a semaphore middleware);
* ``limit-concurrency`` — uvicorn's ``--limit-concurrency`` (it counts connections and tasks
  and answers 503, closing the connection);
* ``apf`` — :class:`~apf_limiter.asgi.APFMiddleware`, one level of 20 seats fair per user
  (64 queues of 50, hand size 6), a ``requestWaitLimit`` under the clients' timeout;
* ``apf-retry`` — the same server, clients that retry after ``Retry-After`` when their
  deadline allows it;
* ``apf-seats-22`` — APF with 22 seats, two more than the pool: a request dispatched waits in
  the pool's own line instead of the pool idling while the next one is woken;
* ``apf-deadlines`` / ``apf-retry-deadlines`` — ``apf`` / ``apf-retry`` with clients that
  send what is left of their timeout in :data:`DEADLINE_HEADER`, which the server reads
  (:class:`~apf_limiter.gate.ClientDeadlines`); ``apf-wait-15`` (the option off) and
  ``apf-wait-15-deadlines`` (on) — the same clients, a ``requestWaitLimit`` of 15 s.

Beside the client's view, each run records the server's own counts over the window (its
``/_bench/stats``): the pool's served requests, hold overrun and handoff gap, the responses
finished after the client's deadline, and APF's dispatched, timed-out and cancelled counts.

The clients of every contender but ``apf-retry`` ignore ``Retry-After``: a rejection is final
(``bare`` and ``semaphore`` never reject; uvicorn's 503 carries no ``Retry-After``). Every
client takes an idle keep-alive connection or opens one (3,000 at most: an arrival
  beyond that is dropped unsent and counted), and one it gave up on is closed.

Per run: the **goodput** (responses within the client's timeout, over the capacity), the
admitted requests' p99 (every request not rejected; one that timed out counts as the timeout),
the mice's p99 (a mouse rejected or timed out counts as the timeout), and the server's
**CPU per rejection** (its process CPU time, less what its served requests cost at 1×, over
its rejections). The load generator checks itself: how late its sends were against their
schedule, and its own CPU. With ``--instructions`` (valgrind), the in-process cost of a
rejection counted in instructions, beside an admitted request's and a bare one's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import random
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import bench_app
from benchmarks.adaptive_sim import percentile
from benchmarks.bench_app import POOL_SIZE, build_info
from benchmarks.callgrind import available as callgrind_available
from benchmarks.callgrind import instructions_per_operation
from benchmarks.http_bench import machine
from benchmarks.loadgen import response_head
from benchmarks.peers import InProcess
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT, running_server

__all__ = ["CONTENDERS", "Outcome", "OpenLoop", "count_instructions", "main", "run_once"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "overload.json"
MULTIPLES = (1.0, 2.0, 5.0, 10.0)
#: APF's queues and wait limit for this service (and the same for the in-process counts).
APF_ENV = {
    "APF_BENCH_CAPACITY": str(POOL_SIZE),
    "APF_BENCH_QUEUE_LENGTH": "50",
    "APF_BENCH_WAIT_LIMIT": "1",
}
#: The client timeout header the ``*-deadlines`` contenders send and read (Envoy's).
DEADLINE_HEADER = "x-envoy-expected-rq-timeout-ms"
#: Client deadlines on (the header read) with a ``requestWaitLimit`` of 15 s (Kubernetes'
#: default), longer than the clients' timeout.
_DEADLINES_ENV = {**APF_ENV, "APF_BENCH_DEADLINE_HEADER": DEADLINE_HEADER}
_WAIT_15 = {"APF_BENCH_WAIT_LIMIT": "15"}
#: Contender -> (application factory, extra uvicorn options, environment, clients retry,
#: clients send their timeout in :data:`DEADLINE_HEADER`).
CONTENDERS: dict[str, tuple[str, list[str], dict[str, str], bool, bool]] = {
    "bare": ("pool_bare", [], {}, False, False),
    "semaphore": ("pool_semaphore", [], {}, False, False),
    "limit-concurrency": ("pool_bare", ["--limit-concurrency", "100"], {}, False, False),
    "apf": ("pool_apf", [], APF_ENV, False, False),
    "apf-retry": ("pool_apf", [], APF_ENV, True, False),
    "apf-seats-22": ("pool_apf", [], {**APF_ENV, "APF_BENCH_CAPACITY": "22"}, False, False),
    "apf-deadlines": ("pool_apf", [], _DEADLINES_ENV, False, True),
    "apf-retry-deadlines": ("pool_apf", [], _DEADLINES_ENV, True, True),
    "apf-wait-15": ("pool_apf", [], {**APF_ENV, **_WAIT_15}, False, True),
    "apf-wait-15-deadlines": ("pool_apf", [], {**_DEADLINES_ENV, **_WAIT_15}, False, True),
}
_REJECTED = (429, 503)
_MICE = 40
#: The mice's requests, all together, as a share of the capacity.
_MICE_SHARE = 0.1


class _NoConnection(Exception):
    """The generator's connection cap is reached: the arrival is dropped (and counted)."""


#: Outcome statuses that are no HTTP status.
TIMED_OUT, TRANSPORT_ERROR, NO_CONNECTION = 0, -1, -2


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time: ``(status, retry_after, close)``."""

    def __init__(self, client: OpenLoop) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.waiter: asyncio.Future[tuple[int, float | None, bool]] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future[tuple[int, float | None, bool]]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def expire(self) -> None:
        """The client gives up: drop the connection (HTTP/1.1 cannot cancel a request)."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(TimeoutError())
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        status, headers = response_head(self.buffer[:end])
        length = int(headers.get(b"content-length", b"0"))
        if len(self.buffer) < end + 4 + length:
            return
        self.buffer = self.buffer[end + 4 + length :]
        retry_after = float(headers[b"retry-after"]) if b"retry-after" in headers else None
        close = headers.get(b"connection", b"").lower() == b"close"
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((status, retry_after, close))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client.open_connections -= 1
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))


@dataclass(frozen=True, slots=True)
class Outcome:
    """One arrival as its client saw it.

    Attributes:
        mouse: A mouse's request (else the flood's).
        scheduled: Seconds since the start when it was due.
        status: The last answer's status, or :data:`TIMED_OUT`, :data:`TRANSPORT_ERROR`, or
            :data:`NO_CONNECTION` (the generator's cap reached: dropped unsent).
        latency: Seconds from the first send to the last answer (the timeout when timed out).
        attempts: Requests sent for it (more than one when it retried).
        done: Seconds since the start when it ended.
    """

    mouse: bool
    scheduled: float
    status: int
    latency: float
    attempts: int
    done: float


@dataclass(slots=True)
class OpenLoop:
    """Open-loop clients: arrivals on a Poisson schedule over a pool of keep-alive connections.

    A request takes an idle connection or opens one (up to ``max_connections``); its client
    gives up ``timeout`` seconds after it first sent it, dropping the connection.

    Attributes:
        host: The server's address.
        port: Its port.
        hold_ms: The ``ms`` each request asks the pool to be held.
        timeout: Seconds after which a client gives up.
        retry: Retry after ``Retry-After`` when the deadline allows it.
        tell_deadline: Send the timeout in :data:`DEADLINE_HEADER` (in milliseconds).
        max_connections: Connections open at once, at most.
    """

    host: str
    port: int
    hold_ms: int
    timeout: float
    retry: bool
    tell_deadline: bool = False
    max_connections: int = 3000
    open_connections: int = 0
    idle: list[_Connection] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    started: float = 0.0
    last_send: float = 0.0

    def _since(self) -> float:
        return asyncio.get_running_loop().time() - self.started

    def _request(self, token: str, deadline: float) -> bytes:
        # x-bench-deadline: the client's deadline on the monotonic clock the server shares,
        # so the pool counts what it served after its client left (not read by APF).
        told = ""
        if self.tell_deadline:
            left = round((deadline - asyncio.get_running_loop().time()) * 1000)
            told = f"{DEADLINE_HEADER}: {max(1, left)}\r\n"
        return (
            f"GET /work?ms={self.hold_ms} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"authorization: Bearer {token}\r\nx-bench-deadline: {deadline:.6f}\r\n{told}\r\n"
        ).encode()

    async def _connection(self, deadline: float, fresh: bool) -> _Connection:
        while self.idle and not fresh:
            connection = self.idle.pop()
            if not connection.lost:
                return connection
        if self.open_connections >= self.max_connections:
            raise _NoConnection
        self.open_connections += 1
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(functools.partial(_Connection, self), self.host, self.port),
                max(0.001, deadline - loop.time()),
            )
        except BaseException:
            self.open_connections -= 1
            raise
        return connection

    async def one(self, token: str, mouse: bool, scheduled: float) -> None:
        """One arrival: send, maybe retry after ``Retry-After``, record the outcome."""
        loop = asyncio.get_running_loop()
        first = loop.time()
        deadline = first + self.timeout
        attempts = 0
        fresh = False  # a new connection, after a kept-alive one failed
        while True:
            attempts += 1
            try:
                connection = await self._connection(deadline, fresh)
                # A retry tells what is left of the timeout, as an HTTP client's would.
                answer = connection.send(self._request(token, deadline))
                timer = loop.call_at(deadline, connection.expire)
                try:
                    status, retry_after, close = await answer
                finally:
                    timer.cancel()
            except TimeoutError:
                self.outcomes.append(
                    Outcome(mouse, scheduled, TIMED_OUT, self.timeout, attempts, self._since())
                )
                return
            except _NoConnection:
                self.outcomes.append(
                    Outcome(mouse, scheduled, NO_CONNECTION, math.nan, attempts, self._since())
                )
                return
            except OSError:
                if not fresh:  # as HTTP clients do: the server may have closed an idle one
                    fresh = True
                    continue
                self.outcomes.append(
                    Outcome(mouse, scheduled, TRANSPORT_ERROR, math.nan, attempts, self._since())
                )
                return
            now = loop.time()
            if close:
                connection.expire()
            else:
                self.idle.append(connection)
            if (
                self.retry
                and status in _REJECTED
                and retry_after is not None
                and now + retry_after < deadline
            ):
                await asyncio.sleep(retry_after)
                continue
            self.outcomes.append(
                Outcome(mouse, scheduled, status, now - first, attempts, now - self.started)
            )
            return

    async def arrivals(
        self, rate: float, tokens: list[str], mouse: bool, duration: float, seed: str
    ) -> list[asyncio.Task[None]]:
        """Start one request per Poisson arrival of ``rate`` a second until ``duration``."""
        loop = asyncio.get_running_loop()
        stream = random.Random(seed)
        tasks: list[asyncio.Task[None]] = []
        due = self.started
        number = 0
        while True:
            due += stream.expovariate(rate)
            if due >= self.started + duration:
                return tasks
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.last_send = loop.time()
            self.lateness.append(self.last_send - due)
            token = tokens[number % len(tokens)]
            tasks.append(asyncio.create_task(self.one(token, mouse, due - self.started)))
            number += 1

    async def server_stats(self, at: float) -> dict[str, Any]:
        """The server's ``/_bench/stats`` (outside the limiter), ``at`` seconds after the start."""
        await asyncio.sleep(max(0.0, self.started + at - asyncio.get_running_loop().time()))
        for _ in range(2000):  # --limit-concurrency may turn it away (503): ask again
            reader, writer = await asyncio.open_connection(self.host, self.port)
            try:
                writer.write(b"GET /_bench/stats HTTP/1.0\r\nhost: bench\r\n\r\n")
                answer = await asyncio.wait_for(reader.read(), 10)
            finally:
                writer.close()
            head, _, body = answer.partition(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.1 200"):
                stats: dict[str, Any] = json.loads(body)
                return stats
            await asyncio.sleep(0.005)
        raise RuntimeError(f"/_bench/stats: no answer, last {answer[:100]!r}")

    async def run(
        self, flood_rate: float, mice_rate: float, duration: float, seed: int, warmup: float = 0.0
    ) -> list[dict[str, Any]]:
        """The flood and the mice (``mice_rate`` in all) for ``duration`` seconds.

        Returns when every arrival has ended: the server's stats at ``warmup`` and ``duration``.
        """
        self.started = asyncio.get_running_loop().time()
        stats = asyncio.gather(self.server_stats(warmup), self.server_stats(duration))
        mice = [f"mouse-{n}" for n in range(_MICE)]
        schedules = [
            self.arrivals(flood_rate, ["flood"], False, duration, f"{seed}/flood"),
            self.arrivals(mice_rate, mice, True, duration, f"{seed}/mice"),
        ]
        spawned = [task for tasks in await asyncio.gather(*schedules) for task in tasks]
        # Each ends within its timeout plus a retry's wait (bounded by the same deadline).
        await asyncio.wait(spawned, timeout=self.timeout + 10)
        for connection in self.idle:
            connection.expire()
        return list(await stats)


def _cpu(pid: int) -> float:
    import psutil  # type: ignore[import-untyped]  # the bench extra; not needed to import this

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _p99(latencies: list[float]) -> float:
    return round(percentile(latencies, 0.99), 4) if latencies else math.nan


def run_once(
    contender: str,
    multiple: float,
    *,
    hold_ms: int,
    duration: float,
    warmup: float,
    timeout: float,
    seed: int,
) -> dict[str, Any]:
    """One contender at one multiple of the capacity, on a fresh server: the run's figures."""
    factory, extra, env, retry, tell = CONTENDERS[contender]
    capacity = POOL_SIZE / (hold_ms / 1000)
    with running_server(contender, factory, uvicorn_args=extra, env=env) as server:
        client = OpenLoop(server.host, server.port, hold_ms, timeout, retry, tell)
        server_cpu, own_cpu, wall = _cpu(server.pid), _own_cpu(), time.perf_counter()
        before, after = asyncio.run(
            client.run(multiple * capacity, _MICE_SHARE * capacity, duration, seed, warmup)
        )
        wall = time.perf_counter() - wall
        server_cpu, own_cpu = _cpu(server.pid) - server_cpu, _own_cpu() - own_cpu
    # Goodput: the answers in time that ended within the measured window (a throughput, which
    # the pool caps); the latencies: the arrivals due within it.
    good = [
        o
        for o in client.outcomes
        if o.status == 200 and o.latency <= timeout and warmup <= o.done < duration
    ]
    window = [o for o in client.outcomes if o.scheduled >= warmup]
    rejected = sum(1 for o in client.outcomes if o.status in _REJECTED)
    admitted = [o.latency for o in window if o.status in (200, TIMED_OUT)]
    mice = [o.latency if o.status == 200 else timeout for o in window if o.mouse]
    lateness = sorted(client.lateness)
    sends = sum(o.attempts for o in client.outcomes)
    return {
        "contender": contender,
        "multiple": multiple,
        "offered_rps": round((multiple + _MICE_SHARE) * capacity, 1),
        "arrivals": len(client.outcomes),
        "goodput": round(len(good) / (capacity * (duration - warmup)), 4),
        "good_rps": round(len(good) / (duration - warmup), 1),
        "admitted_p99": _p99(admitted),
        "admitted_timed_out": sum(1 for o in window if o.status == TIMED_OUT),
        "mice": len(mice),
        "mice_p99": _p99(mice),
        "mice_not_served": sum(1 for o in window if o.mouse and o.status != 200),
        "statuses": {
            str(status): sum(1 for o in client.outcomes if o.status == status)
            for status in sorted({o.status for o in client.outcomes})
        },
        "rejections": rejected,
        "served": sum(1 for o in client.outcomes if o.status == 200),
        "server_cpu_s": round(server_cpu, 3),
        "server": _server_window(before, after, duration - warmup, hold_ms),
        "generator": {
            "cpu_s": round(own_cpu, 3),
            "cpu_share": round(own_cpu / wall, 3),
            "scheduled_rate": round(len(client.outcomes) / duration, 1),
            # Arrivals over the time from the start to the last one's send: the rate achieved.
            "achieved_rate": round(len(client.outcomes) / (client.last_send - client.started), 1),
            "sends_with_retries": sends,
            "lateness_p50_ms": round(percentile(lateness, 0.5) * 1000, 2),
            "lateness_p99_ms": round(percentile(lateness, 0.99) * 1000, 2),
            "no_connection": sum(1 for o in client.outcomes if o.status == NO_CONNECTION),
            "transport_errors": sum(1 for o in client.outcomes if o.status == TRANSPORT_ERROR),
        },
    }


def _server_window(
    before: dict[str, Any], after: dict[str, Any], seconds: float, hold_ms: int
) -> dict[str, Any]:
    """What the server did within the measured window, from its stats at its two ends.

    ``seconds``: the window asked for; the stats may come late (``--limit-concurrency`` turns
    the request for them away under load), so the pool's figures are over their own times.
    """
    seconds = after["monotonic"] - before["monotonic"]
    pool = {key: after["pool"][key] - before["pool"][key] for key in after["pool"]}
    window: dict[str, Any] = {
        # Slot-seconds held over the pool's slot-seconds: 1.0 is a pool never idle.
        "pool_busy": round(pool["held_s"] / (POOL_SIZE * seconds), 4),
        "pool_served": pool["served"],
        "stats_window_s": round(seconds, 3),
        "handoff_gap_ms": round(pool["handoff_gap_s"] / pool["served"] * 1000, 2)
        if pool["served"]
        else None,
        "hold_overrun_ms": round(pool["overrun_s"] / pool["served"] * 1000, 2)
        if pool["served"]
        else None,
        "pool_line_wait_ms": round(pool["line_wait_s"] / pool["served"] * 1000, 2)
        if pool["served"]
        else None,
        # Served with the client gone: the pool's work no one received.
        "answered_after_deadline": pool["answered_after_deadline"],
    }
    for key in ("dispatched", "timed_out", "cancelled", "rejected"):
        if key in after:
            window[key] = after[key] - before[key]
    return window


def _cpu_per_rejection(runs: list[dict[str, Any]]) -> None:
    """Per run: server CPU less its served requests at the 1× run's cost, over rejections."""
    by_contender: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run["multiple"] == 1.0:
            by_contender[run["contender"]] = run
    for run in runs:
        base = by_contender.get(run["contender"])
        per_served = base["server_cpu_s"] / base["served"] if base and base["served"] else 0.0
        run["cpu_per_served_us_at_1x"] = round(per_served * 1e6, 1)
        if run["rejections"] and run is not base:  # the 1× run is the baseline itself
            left = run["server_cpu_s"] - run["served"] * per_served
            run["cpu_per_rejection_us"] = round(left / run["rejections"] * 1e6, 1)
        else:
            run["cpu_per_rejection_us"] = None


# --- in-process instruction counts ----------------------------------------------------------

_HOLD_FOREVER_MS = 10**9


def _scope(ms: int) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/work",
        "raw_path": b"/work",
        "root_path": "",
        "query_string": b"ms=%d" % ms,
        "headers": [(b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer flood")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


async def _count(kind: str, requests: int) -> None:
    # A child of count_instructions(), run under callgrind: set up, warm up, then ``requests``
    # requests of ``kind``: "bare" (the pool alone), "admitted" (APF, free seats) or
    # "rejected" (APF, every seat held and the flood's queues full: queue-full 429s).
    os.environ.update(APF_ENV)
    # Real time runs slowly under valgrind: the held requests must not time out meanwhile.
    os.environ["APF_BENCH_WAIT_LIMIT"] = "60"  # the most a configuration may say
    app = bench_app.pool_bare() if kind == "bare" else bench_app.pool_apf()
    held: list[asyncio.Task[None]] = []
    if kind == "rejected":
        holder = InProcess(app, _scope(_HOLD_FOREVER_MS))
        held = [asyncio.create_task(holder.request()) for _ in range(POOL_SIZE + 6 * 50)]
        for _ in range(10):
            await asyncio.sleep(0)
    driver = InProcess(app, _scope(0))
    await driver.run(200)
    await driver.run(requests)
    expected = 429 if kind == "rejected" else 200
    if driver.statuses != {expected: requests + 200}:
        raise RuntimeError(f"{kind}: expected only {expected}s, got {driver.statuses}")
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)


def count_instructions(*, short: int, long: int) -> dict[str, float]:
    """Instructions per request in-process: bare, APF admitted and APF rejected (callgrind)."""
    command = [sys.executable, "-m", "benchmarks.overload", "--count"]
    return {
        kind: round(
            instructions_per_operation([*command, kind], "--requests", short, long, REPO_ROOT)
        )
        for kind in ("bare", "admitted", "rejected")
    }


# --- the run --------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> str:
    """The table: per multiple and contender, the run's figures."""
    lines = [
        f"{'×':>4} {'contender':<18} {'goodput':>7} {'admitted p99':>12} {'mice p99':>9} "
        f"{'rejected':>8} {'µs CPU/rej':>10} {'late p99':>9} {'gen CPU':>7}"
    ]
    for run in result["runs"]:
        per_rejection = run["cpu_per_rejection_us"]
        lines.append(
            f"{run['multiple']:4g} {run['contender']:<18} {run['goodput']:7.3f} "
            f"{run['admitted_p99']:12.3f} {run['mice_p99']:9.3f} {run['rejections']:8} "
            f"{'' if per_rejection is None else f'{per_rejection:.0f}':>10} "
            f"{run['generator']['lateness_p99_ms']:7.1f}ms {run['generator']['cpu_share']:7.2f}"
        )
    counted = result.get("instructions")
    if counted:
        lines.append(
            "instructions per request, in-process: "
            + ", ".join(f"{kind} {n:,}" for kind, n in counted.items())
        )
    lines += [f"Note: {note}" for note in result["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse options, run every contender at every multiple, print, write the JSON file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", help=argparse.SUPPRESS)  # a child under callgrind
    parser.add_argument("--requests", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--hold-ms", type=int, default=200, help="pool hold per request")
    parser.add_argument("--multiples", default=",".join(f"{m:g}" for m in MULTIPLES))
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated")
    parser.add_argument("--duration", type=float, default=7.0, help="seconds of load per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds left out per run")
    parser.add_argument("--timeout", type=float, default=2.0, help="the clients' timeout")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--instructions", action="store_true", help="count under callgrind")
    parser.add_argument("--quick", action="store_true", help="a smoke test: short runs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.count:
        asyncio.run(_count(args.count, args.requests))
        return {}
    if args.quick:
        args.duration, args.warmup = 1.0, 0.2
    multiples = [float(m) for m in args.multiples.split(",")]
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders: {sorted(unknown)}")
    notes: list[str] = []
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for multiple in multiples:
            # Rotated, so that no contender always runs first or after the same neighbour.
            shift = (round_ + multiples.index(multiple)) % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                run = run_once(
                    contender,
                    multiple,
                    hold_ms=args.hold_ms,
                    duration=args.duration,
                    warmup=args.warmup,
                    timeout=args.timeout,
                    seed=args.seed + round_,
                )
                run["round"] = round_
                runs.append(run)
                print(
                    f"  {multiple:g}× {contender}: goodput {run['goodput']:.3f}, "
                    f"mice p99 {run['mice_p99']:.3f} s, "
                    f"pool busy {run['server']['pool_busy']:.3f}, served after the client "
                    f"left {run['server']['answered_after_deadline']}, generator late p99 "
                    f"{run['generator']['lateness_p99_ms']:.1f} ms",
                    flush=True,
                )
    _cpu_per_rejection(runs)
    result: dict[str, Any] = {
        "machine": machine(),
        "build": build_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "hold_ms": args.hold_ms,
        "pool": POOL_SIZE,
        "capacity_rps": POOL_SIZE / (args.hold_ms / 1000),
        "mice": {"count": _MICE, "share_of_capacity": _MICE_SHARE},
        "duration": args.duration,
        "warmup": args.warmup,
        "timeout": args.timeout,
        "rounds": args.rounds,
        "contenders": {name: CONTENDERS[name][:3] for name in contenders},
        "notes": notes,
        "runs": runs,
    }
    if args.instructions:
        if callgrind_available():
            short, long = (50, 150) if args.quick else (500, 1500)
            result["instructions"] = count_instructions(short=short, long=long)
        else:
            notes.append("valgrind is not installed: no instruction counts")
    print(report(result))
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)
    return result


if __name__ == "__main__":
    main()
