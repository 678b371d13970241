"""Elephant and mice over real HTTP: a bounded loopback client for the fairness benchmark.

The server (:func:`benchmarks.bench_app.work_apf` or ``work_semaphore``) runs ``GET
/work?ms=N`` — the client draws N, so both variants see the same requests — and says in
``x-queue-wait`` how long each request waited for its seat. The elephant keeps
``elephant_concurrency`` requests in flight on keep-alive connections; each mouse sends
requests at Poisson times, each on a new connection (open loop: a slow answer does not slow
the mouse down). Every client names itself with ``authorization: Bearer <name>``, the flow
distinguisher of the APF variant. The run stops sending after ``duration`` seconds and waits
(bounded) for the requests in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

__all__ = ["HttpLoad", "HttpRecord", "run_http_load"]

_DRAIN_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class HttpLoad:
    """The load of one run.

    Attributes:
        duration: Seconds of load.
        elephant_concurrency: Requests the elephant keeps in flight.
        mice: Number of mice.
        mouse_rate: Requests per second of each mouse (Poisson).
        service_time: Mean service time in seconds (uniform between half and 1.5 times it).
        seed: Seed of the arrival and service streams.
    """

    duration: float = 20.0
    elephant_concurrency: int = 64
    mice: int = 10
    mouse_rate: float = 2.0
    service_time: float = 0.1
    seed: int = 1


@dataclass(frozen=True, slots=True)
class HttpRecord:
    """One request as the client saw it.

    Attributes:
        flow: ``elephant`` or ``mouse-<n>``.
        sent: Seconds since the run started when the request was sent.
        latency: Seconds until the response was complete (``nan`` on failure).
        status: The HTTP status (0 on a transport error).
        wait: Seconds the server says the request waited for its seat (``nan`` if not said).
    """

    flow: str
    sent: float
    latency: float
    status: int
    wait: float


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
        status = int(head[9:12])
        length, wait = 0, float("nan")
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"x-queue-wait":
                wait = float(value)
        await reader.readexactly(length)
        now = time.perf_counter()
        self.records.append(HttpRecord(flow, sent - self.started, now - sent, status, wait))

    def failed(self, flow: str, sent: float) -> None:
        self.records.append(HttpRecord(flow, sent - self.started, float("nan"), 0, float("nan")))

    async def elephant(self, slot: int) -> None:
        stream = random.Random(f"{self.load.seed}/elephant/{slot}")
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while time.perf_counter() < self.end:
                sent = time.perf_counter()
                try:
                    if connection is None:
                        connection = await asyncio.wait_for(
                            asyncio.open_connection(self.host, self.port), _CONNECT_TIMEOUT
                        )
                    request = self.request_bytes("elephant", stream)
                    await self.exchange("elephant", request, *connection, sent)
                except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError):
                    self.failed("elephant", sent)
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
    """Run one elephant-and-mice load against the server; returns every request's record."""
    client = _Client(host, port, load)
    spawned: set[asyncio.Task[None]] = set()
    tasks = [
        asyncio.create_task(client.elephant(slot)) for slot in range(load.elephant_concurrency)
    ]
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
