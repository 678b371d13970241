"""Fairness over real HTTP: a bounded loopback client for the fairness benchmark.

The server (:func:`benchmarks.bench_app.work_apf` or ``work_semaphore``) runs ``GET
/work?ms=N`` — the client draws N, so both variants see the same requests — and says in
``x-queue-wait`` how long each request waited for its seat, and in ``x-start``/``x-end`` when
its handler started and ended (the monotonic clock, shared with the client on Linux).

Two kinds of flows, any mix of them:

* **closed loop**: the elephant (``elephant_concurrency`` requests in flight) and the
  ``backlogged`` flows (``flow-<n>``, each with its own number of requests in flight), each
  request sent as soon as the previous one on its keep-alive connection is answered;
* **mice**: Poisson arrivals, each on a new connection (open loop: a slow answer does not slow
  the mouse down).

Every client names itself with ``authorization: Bearer <name>``, the flow distinguisher of the
APF variant. The run stops sending after ``duration`` seconds and waits (bounded) for the
requests in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from benchmarks.loadgen import response_head

__all__ = ["HttpLoad", "HttpRecord", "run_http_load"]

_DRAIN_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class HttpLoad:
    """The load of one run.

    Attributes:
        duration: Seconds of load.
        elephant_concurrency: Requests the elephant keeps in flight (0: no elephant).
        backlogged: Requests in flight of each backlogged flow ``flow-<n>``.
        mice: Number of mice.
        mouse_rate: Requests per second of each mouse (Poisson).
        service_time: Mean service time in seconds (uniform between half and 1.5 times it).
        seed: Seed of the arrival and service streams.
    """

    duration: float = 20.0
    elephant_concurrency: int = 64
    backlogged: tuple[int, ...] = ()
    mice: int = 10
    mouse_rate: float = 2.0
    service_time: float = 0.1
    seed: int = 1


@dataclass(frozen=True, slots=True)
class HttpRecord:
    """One request as the client saw it.

    Attributes:
        flow: ``elephant``, ``flow-<n>`` or ``mouse-<n>``.
        sent: Seconds since the run started when the request was sent.
        latency: Seconds until the response was complete (``nan`` on failure).
        status: The HTTP status (0 on a transport error).
        wait: Seconds the server says the request waited for its seat (``nan`` if not said).
        start: Seconds since the run started when the handler started, as the server says
            (``nan`` if not said).
        end: The same for the handler's end.
    """

    flow: str
    sent: float
    latency: float
    status: int
    wait: float
    start: float = float("nan")
    end: float = float("nan")


class _Client:
    def __init__(self, host: str, port: int, load: HttpLoad) -> None:
        self.host = host
        self.port = port
        self.load = load
        self.started = time.perf_counter()
        self.end = self.started + load.duration
        self.records: list[HttpRecord] = []

    def request_bytes(self, flow: str, stream: random.Random) -> bytes:
        mean = self.load.service_time
        ms = round(stream.uniform(0.5 * mean, 1.5 * mean) * 1000)
        return (
            f"GET /work?ms={ms} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"authorization: Bearer {flow}\r\n\r\n"
        ).encode()

    async def exchange(
        self,
        flow: str,
        request: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sent: float,
    ) -> None:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status, headers = response_head(head[:-4])
        nan = b"nan"
        wait = float(headers.get(b"x-queue-wait", nan))
        start = float(headers.get(b"x-start", nan)) - self.started
        end = float(headers.get(b"x-end", nan)) - self.started
        await reader.readexactly(int(headers.get(b"content-length", b"0")))
        now = time.perf_counter()
        self.records.append(
            HttpRecord(flow, sent - self.started, now - sent, status, wait, start, end)
        )

    def failed(self, flow: str, sent: float) -> None:
        self.records.append(HttpRecord(flow, sent - self.started, float("nan"), 0, float("nan")))

    async def closed_loop(self, flow: str, slot: int) -> None:
        stream = random.Random(f"{self.load.seed}/{flow}/{slot}")
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while time.perf_counter() < self.end:
                sent = time.perf_counter()
                try:
                    if connection is None:
                        connection = await asyncio.wait_for(
                            asyncio.open_connection(self.host, self.port), _CONNECT_TIMEOUT
                        )
                    request = self.request_bytes(flow, stream)
                    await self.exchange(flow, request, *connection, sent)
                except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError):
                    self.failed(flow, sent)
                    if connection is not None:
                        connection[1].close()
                    connection = None
                    await asyncio.sleep(0.1)
        finally:
            if connection is not None:
                connection[1].close()

    async def mouse_request(self, flow: str, request: bytes) -> None:
        sent = time.perf_counter()
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            connection = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), _CONNECT_TIMEOUT
            )
            await self.exchange(flow, request, *connection, sent)
        except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError):
            self.failed(flow, sent)
        finally:
            if connection is not None:
                connection[1].close()

    async def mouse(self, number: int, spawned: set[asyncio.Task[None]]) -> None:
        flow = f"mouse-{number}"
        stream = random.Random(f"{self.load.seed}/{flow}")
        while True:
            await asyncio.sleep(stream.expovariate(self.load.mouse_rate))
            if time.perf_counter() >= self.end:
                return
            task = asyncio.create_task(self.mouse_request(flow, self.request_bytes(flow, stream)))
            spawned.add(task)
            task.add_done_callback(spawned.discard)


async def run_http_load(host: str, port: int, load: HttpLoad) -> list[HttpRecord]:
    """Run one load against the server; returns every request's record."""
    client = _Client(host, port, load)
    spawned: set[asyncio.Task[None]] = set()
    closed = [("elephant", slot) for slot in range(load.elephant_concurrency)]
    for number, in_flight in enumerate(load.backlogged):
        closed += [(f"flow-{number}", slot) for slot in range(in_flight)]
    tasks = [asyncio.create_task(client.closed_loop(flow, slot)) for flow, slot in closed]
    tasks += [asyncio.create_task(client.mouse(n, spawned)) for n in range(load.mice)]
    try:
        await asyncio.wait(tasks, timeout=load.duration + _DRAIN_TIMEOUT)
        if spawned:
            await asyncio.wait(list(spawned), timeout=_DRAIN_TIMEOUT)
    finally:
        everything = [*tasks, *spawned]
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)
    return client.records
