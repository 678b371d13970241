"""A custom front door on the request gate: a line protocol over TCP, with APF in front.

Each request is one line, ``<user> <path>``; the answer is one line: ``ok <flow schema>
<priority level> wait=<seconds>``, ``refused <reason> retry-after=<seconds>``, or
``expired <reason>``. The whole mapping onto the gate is :func:`serve_one`: classify, start,
wait (cancelled when the client leaves), run, end. See docs/gate.md.

Run it with ``python examples/custom_front_door.py`` and try ``nc 127.0.0.1 8765``.
"""

from __future__ import annotations

import asyncio
import contextlib

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.gate import Gate, SlowClients

WORK_SECONDS = 0.05


async def work(path: str) -> None:
    """The service itself: here, a short sleep."""
    await asyncio.sleep(WORK_SECONDS)


async def serve_one(gate: Gate, line: str) -> str:
    """Map one request of the line protocol onto the gate; the answer line."""
    user, _, path = line.strip().partition(" ")
    digest = RequestDigest(user=user or "system:anonymous", verb="get", path=path or "/")
    try:
        ticket = gate.start(digest)  # never waits
    except Rejected as rejected:
        return f"refused {rejected.reason} retry-after={rejected.retry_after}"
    error: BaseException | None = None
    try:
        if not ticket.admitted:
            await ticket.wait()  # a cancelled task (client gone) leaves the queue
        ticket.response_started()
        await work(digest.path)
    except Rejected as rejected:  # the wait limit passed
        return f"refused {rejected.reason} retry-after={rejected.retry_after}"
    except BaseException as exc:
        error = exc
    finally:
        expired = ticket.end(error)
    if expired:
        return f"expired {ticket.reason}"
    if error is not None:
        raise error
    return f"ok {ticket.flow_schema} {ticket.priority_level} wait={ticket.queue_wait:.3f}"


async def handle(gate: Gate, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection: one request per line, answered in order."""
    try:
        while line := (await reader.readline()).decode("utf-8", "replace"):
            writer.write((await serve_one(gate, line[:1024]) + "\n").encode())
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def start_server(gate: Gate, port: int = 0) -> asyncio.Server:
    """Listen on 127.0.0.1 (``port`` 0: any free port)."""
    return await asyncio.start_server(
        lambda reader, writer: handle(gate, reader, writer), "127.0.0.1", port
    )


def make_gate() -> Gate:
    """A gate on the built-in configuration, with a 10-second deadline per request."""
    return Gate(Limiter(), slow_clients=SlowClients(request_timeout=10.0))


async def main() -> None:
    """Serve on 127.0.0.1:8765 until interrupted."""
    server = await start_server(make_gate(), 8765)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
