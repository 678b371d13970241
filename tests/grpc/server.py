"""A real ``grpc.aio`` server on 127.0.0.1 for the interceptor's tests: raw-bytes methods.

No protoc: generic handlers with bytes in and out. The methods of ``/test.Work/``:

* ``Sleep`` (unary-unary): sleeps the milliseconds the request names, answers its own
  server-side wait (``time the handler started - time the call arrived``) as text;
* ``Hold`` (unary-unary): waits until the test sets ``Work.release``;
* ``Fail`` (unary-unary): raises;
* ``Ticks`` (unary-stream, async generator): sends one message, then waits for
  ``Work.release``, then sends one more;
* ``Writes`` (unary-stream, ``context.write()``): the same with writes;
* ``Sum`` (stream-unary) and ``Echo`` (stream-stream): add up and echo request messages.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import grpc

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

#: When the call reached the server (set by :class:`Stamp`, the outermost interceptor).
arrived: contextvars.ContextVar[float] = contextvars.ContextVar("arrived", default=0.0)


class Stamp(grpc.aio.ServerInterceptor):
    """The outermost interceptor: notes when each call arrived, before any admission."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        arrived.set(time.monotonic())
        return await continuation(handler_call_details)


class Work:
    """The test service; ``release`` lets the held calls go on; ``semaphore`` is FIFO's gate."""

    def __init__(self, semaphore: asyncio.Semaphore | None = None) -> None:
        self.release = asyncio.Event()
        self.started = 0
        self.semaphore = semaphore
        self.port = 0  # the port it is served on

    async def sleep(self, request: bytes, context: Context) -> bytes:
        if self.semaphore is None:
            return await self._sleep(request)
        async with self.semaphore:
            return await self._sleep(request)

    async def _sleep(self, request: bytes) -> bytes:
        wait = time.monotonic() - arrived.get()
        await asyncio.sleep(int(request or b"0") / 1000)
        return f"{wait:.6f}".encode()

    async def hold(self, request: bytes, context: Context) -> bytes:
        self.started += 1
        await self.release.wait()
        return b"held"

    async def fail(self, request: bytes, context: Context) -> bytes:
        raise ValueError("the handler failed")

    async def ticks(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        self.started += 1
        yield b"first"
        await self.release.wait()
        yield b"second"

    async def writes(self, request: bytes, context: Context) -> None:
        self.started += 1
        await context.write(b"first")
        await self.release.wait()
        await context.write(b"second")

    async def sum(self, requests: AsyncIterator[bytes], context: Context) -> bytes:
        return str(sum([int(r) async for r in requests])).encode()

    async def echo(self, requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    def methods(self) -> dict[str, Handler]:
        """The methods of ``/test.Work/`` by name (a subclass adds its own)."""
        unary = grpc.unary_unary_rpc_method_handler
        return {
            "Sleep": unary(self.sleep),
            "Hold": unary(self.hold),
            "Fail": unary(self.fail),
            "Ticks": grpc.unary_stream_rpc_method_handler(self.ticks),
            "Writes": grpc.unary_stream_rpc_method_handler(self.writes),
            "Sum": grpc.stream_unary_rpc_method_handler(self.sum),
            "Echo": grpc.stream_stream_rpc_method_handler(self.echo),
        }

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler("test.Work", self.methods())


@asynccontextmanager
async def serving(
    work: Work, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()
) -> AsyncIterator[grpc.aio.Channel]:
    """Serve ``work`` on a free 127.0.0.1 port; yield a channel to it; stop both after."""
    server = grpc.aio.server(interceptors=[Stamp(), *interceptors])
    server.add_generic_rpc_handlers((work.handler(),))
    work.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{work.port}") as channel:
            yield channel
    finally:
        work.release.set()
        await server.stop(grace=None)


def bearer(user: str) -> tuple[tuple[str, str], ...]:
    """The call metadata naming ``user`` (what the tests' ``identify`` hook reads)."""
    return (("authorization", f"Bearer {user}"),)


def identify_bearer(context: Context) -> str | None:
    """An ``identify`` hook: the bearer token is the user name (a test, not authentication)."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[7:] or None
    return None


def one_level(
    seats: int, *, queues: int = 64, queue_length: int = 50, wait_limit: float = 15
) -> dict[str, Any]:
    """One level ``work`` of ``seats`` seats, fair per user (the bearer token)."""
    return {
        "serverConcurrencyLimit": seats,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [
            {
                "name": "work",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "lendablePercent": 0,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {
                            "queues": queues,
                            "handSize": min(6, queues),
                            "queueLengthLimit": queue_length,
                        },
                    },
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "callers",
                "priorityLevelConfiguration": {"name": "work"},
                "matchingPrecedence": 1000,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                        "nonResourceRules": [
                            {"verbs": ["post"], "nonResourceURLs": ["/test.Work/*"]}
                        ],
                    },
                    {
                        "subjects": [
                            {"kind": "Group", "group": {"name": "system:unauthenticated"}}
                        ],
                        "nonResourceRules": [
                            {"verbs": ["post"], "nonResourceURLs": ["/test.Work/*"]}
                        ],
                    },
                ],
            }
        ],
    }


def unary(channel: grpc.aio.Channel, method: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """A unary-unary callable of raw bytes."""
    return channel.unary_unary(method)


def unary_stream(
    channel: grpc.aio.Channel, method: str
) -> grpc.aio.UnaryStreamMultiCallable[bytes, bytes]:
    """A unary-stream callable of raw bytes."""
    return channel.unary_stream(method)


def stream_unary(
    channel: grpc.aio.Channel, method: str
) -> grpc.aio.StreamUnaryMultiCallable[bytes, bytes]:
    """A stream-unary callable of raw bytes."""
    return channel.stream_unary(method)


def stream_stream(
    channel: grpc.aio.Channel, method: str
) -> grpc.aio.StreamStreamMultiCallable[bytes, bytes]:
    """A stream-stream callable of raw bytes."""
    return channel.stream_stream(method)
