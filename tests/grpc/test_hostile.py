"""A hostile retest of APFInterceptor: clients that leave, stall and storm; handlers that fail.

Real ``grpc.aio`` servers and clients on 127.0.0.1. After every attack the limiter must show
nothing held (no seat, no waiting request, every long-running place back), the counts must
add up (each call that reached the limiter was dispatched, rejected or cancelled, once) and
the server must still serve.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from apf_limiter.grpc import APFInterceptor
from tests.grpc.server import (
    Context,
    Handler,
    Work,
    bearer,
    identify_bearer,
    one_level,
    serving,
    stream_stream,
    stream_unary,
    unary,
    unary_stream,
)

pytestmark = pytest.mark.timeout(60)

CHUNK = b"x" * (256 * 1024)  # a reader that stops reading fills the flow-control window fast


class Hostile(Work):
    """The test service, with methods that flood, abort, break midway and chat."""

    def __init__(self) -> None:
        super().__init__()
        #: ``probe()``: the seats held now, read by ``Flood`` as its cleanup runs.
        self.probe: Callable[[], int] = lambda: -1
        #: One entry per ``Flood`` cleanup: (it ran in the call's own task, seats held then).
        self.cleanups: list[tuple[bool, int]] = []

    async def flood(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        task = asyncio.current_task()
        try:
            for _ in range(200):  # 50 MiB: far more than any flow-control window
                yield CHUNK
        finally:
            self.cleanups.append((asyncio.current_task() is task, self.probe()))

    async def late(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        # Blocks the event loop past the request deadline: the overdue expiry then fires in
        # the loop's next turn, while the first write (which carries the initial metadata)
        # still waits for gRPC's completion queue.
        time.sleep(0.4)
        yield b"late"

    async def abort(self, request: bytes, context: Context) -> bytes:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not you")
        raise AssertionError("context.abort returned")  # pragma: no cover

    async def broken(self, request: bytes, context: Context) -> AsyncIterator[bytes]:
        yield b"first"
        raise RuntimeError("the stream broke midway")

    async def chat(self, requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request
            await self.release.wait()

    def methods(self) -> dict[str, Handler]:
        return {
            **super().methods(),
            "Flood": grpc.unary_stream_rpc_method_handler(self.flood),
            "Late": grpc.unary_stream_rpc_method_handler(self.late),
            "Abort": grpc.unary_unary_rpc_method_handler(self.abort),
            "Broken": grpc.unary_stream_rpc_method_handler(self.broken),
            "Chat": grpc.stream_stream_rpc_method_handler(self.chat),
        }


def _interceptor(seats: int, level: dict[str, Any] | None = None, **kwargs: Any) -> APFInterceptor:
    return APFInterceptor(
        config=one_level(seats, **(level or {})), identify=identify_bearer, **kwargs
    )


def _seats(interceptor: APFInterceptor) -> int:
    return interceptor.limiter.statistics().priority_levels["work"].executing_seats


async def _quiet(interceptor: APFInterceptor) -> None:
    """Wait (at most 5 s) until nothing is held; then check that the counts add up."""
    deadline = time.monotonic() + 5.0
    while True:
        stats = interceptor.limiter.statistics()
        held = {
            name: (level.executing_requests, level.executing_seats, level.waiting_requests)
            for name, level in stats.priority_levels.items()
            if level.executing_requests or level.executing_seats or level.waiting_requests
        }
        open_long = {
            name: interceptor.gate.open_long_running(name)
            for name in stats.flow_schemas
            if interceptor.gate.open_long_running(name)
        }
        if not held and not open_long:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"still held 5 s after the traffic stopped: {held} {open_long}")
        await asyncio.sleep(0.01)
    for name, schema in stats.flow_schemas.items():
        ended = schema.dispatched + sum(schema.rejected.values()) + schema.cancelled
        assert schema.matched == ended, (name, schema)
        assert schema.executing_requests == schema.waiting_requests == 0, (name, schema)


async def _serves(channel: grpc.aio.Channel) -> None:
    assert await unary(channel, "/test.Work/Sleep")(b"0", metadata=bearer("zoe"), timeout=5)


async def _status(call: Any) -> grpc.StatusCode:
    """The status a call ends with, its messages drained (at most 5 s: a call never answered)."""
    try:
        async with asyncio.timeout(5):
            if hasattr(call, "read"):
                while await call.read() is not grpc.aio.EOF:
                    pass
            else:
                await call
    except grpc.aio.AioRpcError as error:
        return error.code()
    except asyncio.CancelledError:
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.OK


async def test_a_deadline_passing_while_a_stream_waits_on_a_slow_reader_is_answered() -> None:
    # The handler's messages were yielded to gRPC, which wrote them outside the wrapper: the
    # deadline's cancellation landed in gRPC's write, the call was never answered (the client
    # hung), and the seat went back only when the garbage collector closed the wrapper.
    interceptor = _interceptor(2, request_timeout=0.3)
    async with serving(Hostile(), [interceptor]) as channel:
        flood = unary_stream(channel, "/test.Work/Flood")(b"", metadata=bearer("slow"))
        assert await flood.read() == CHUNK
        await asyncio.sleep(0.8)  # stops reading: the server's write waits past the deadline
        assert await _status(flood) == grpc.StatusCode.DEADLINE_EXCEEDED
        await _quiet(interceptor)
        await _serves(channel)


async def test_a_deadline_passing_during_the_first_message_is_answered() -> None:
    # The cancelled first write left the initial metadata pending but unmarked in gRPC; the
    # status sent them again, gRPC refused the batch (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS)
    # and the call was never answered (1 in ~10 runs of a 300-call storm hit this).
    interceptor = _interceptor(2, request_timeout=0.3)
    async with serving(Hostile(), [interceptor]) as channel:
        for _ in range(2):
            late = unary_stream(channel, "/test.Work/Late")(b"", metadata=bearer("late"))
            assert await _status(late) == grpc.StatusCode.DEADLINE_EXCEEDED
        await _quiet(interceptor)
        await _serves(channel)


async def test_a_client_leaving_mid_write_ends_the_handler_in_its_own_call() -> None:
    # A client gone while the server waits to write: the handler's own cleanup runs in the
    # call's task, its seat still held, before the seat goes back (not later, unaccounted,
    # in a task of the garbage collector's).
    interceptor = _interceptor(2)
    work = Hostile()
    work.probe = lambda: _seats(interceptor)
    async with serving(work, [interceptor]) as channel:
        flood = unary_stream(channel, "/test.Work/Flood")(b"", metadata=bearer("gone"))
        assert await flood.read() == CHUNK
        await asyncio.sleep(0.2)  # the server's write now waits for the window
        flood.cancel()
        await _quiet(interceptor)
        await _serves(channel)
    assert work.cleanups == [(True, 1)]


async def test_a_sync_handler_is_refused_clearly_not_run_on_the_event_loop() -> None:
    # Called from the async wrapper, a sync handler blocked the loop and its context.abort()
    # was a coroutine never awaited: the aborted call below was answered OK.
    def denied(request: bytes, context: Any) -> bytes:
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "not you")
        return b""

    interceptor = _interceptor(2)
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Work", {"Denied": _sync(denied)}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await unary(channel, "/test.Work/Denied")(b"", metadata=bearer("alice"))
    finally:
        await server.stop(None)
    assert refused.value.code() == grpc.StatusCode.UNKNOWN
    assert "async handlers only" in (refused.value.details() or "")
    assert "/test.Work/Denied" in (refused.value.details() or "")
    await _quiet(interceptor)


def _sync(behavior: Callable[[bytes, Any], bytes]) -> Handler:
    return grpc.unary_unary_rpc_method_handler(behavior)


async def _requests(count: int, pause: float) -> AsyncIterator[bytes]:
    for index in range(count):
        yield str(index).encode()
        await asyncio.sleep(pause)


async def test_cancels_deadlines_and_failures_of_every_kind_leave_nothing_held() -> None:
    interceptor = _interceptor(
        1, long_running={"/test.Work/Chat"}, max_long_running={"*": 1}, request_timeout=2.0
    )
    work = Hostile()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        running = hold(b"", metadata=bearer("alice"))
        await _until(lambda: work.started == 1)
        queued = [hold(b"", metadata=bearer("bob")), hold(b"", metadata=bearer("carol"))]
        chat = stream_stream(channel, "/test.Work/Chat")(_requests(1, 0), metadata=bearer("dan"))
        late = hold(b"", metadata=bearer("erin"), timeout=0.2)  # its deadline, while queued
        await _until(lambda: _level_waiting(interceptor) >= 3)
        for call in (*queued, chat):  # cancelled while queued (the chat holds a cap place)
            call.cancel()
        assert await _status(late) in (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,  # the server's time-out may answer first
        )
        running.cancel()  # cancelled while running
        await _quiet(interceptor)

        work.release.clear()
        ticks = unary_stream(channel, "/test.Work/Ticks")(b"", metadata=bearer("alice"))
        assert await ticks.read() == b"first"
        ticks.cancel()  # mid-stream, server streaming
        chat = stream_stream(channel, "/test.Work/Chat")(_requests(5, 0.5), metadata=bearer("b"))
        assert await chat.read() == b"0"
        chat.cancel()  # mid-stream, bidi, long-running
        total = stream_unary(channel, "/test.Work/Sum")(_requests(5, 0.5), metadata=bearer("c"))
        await _until(lambda: _seats(interceptor) == 1)
        total.cancel()  # while its client stream runs
        held = hold(b"", metadata=bearer("dan"), timeout=0.3)  # its deadline, while running
        assert await _status(held) == grpc.StatusCode.DEADLINE_EXCEEDED
        for method, code in (
            ("/test.Work/Fail", grpc.StatusCode.UNKNOWN),
            ("/test.Work/Abort", grpc.StatusCode.PERMISSION_DENIED),
        ):
            assert await _status(unary(channel, method)(b"", metadata=bearer("e"))) == code
        broken = unary_stream(channel, "/test.Work/Broken")(b"", metadata=bearer("f"))
        assert await broken.read() == b"first"
        assert await _status(broken) == grpc.StatusCode.UNKNOWN
        await _quiet(interceptor)
        await _serves(channel)


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5.0
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def _level_waiting(interceptor: APFInterceptor) -> int:
    return interceptor.limiter.statistics().priority_levels["work"].waiting_requests


async def test_a_storm_of_cancels_on_a_saturated_level_leaves_nothing_held() -> None:
    # 200 calls of all kinds on 2 seats, half of them cancelled at random times.
    interceptor = _interceptor(
        2,
        {"queues": 16, "queue_length": 200},
        long_running={"/test.Work/Chat"},
        max_long_running={"*": 100},
    )
    work = Hostile()
    work.release.set()
    draw = random.Random(31)

    async def one(index: int, channel: grpc.aio.Channel) -> grpc.StatusCode:
        metadata = bearer(f"user{index % 10}")
        kind = index % 4
        call: Any
        if kind == 0:
            call = unary(channel, "/test.Work/Sleep")(
                str(draw.randint(0, 20)).encode(), metadata=metadata
            )
        elif kind == 1:
            call = unary_stream(channel, "/test.Work/Flood")(b"", metadata=metadata)
        elif kind == 2:
            call = stream_stream(channel, "/test.Work/Chat")(_requests(3, 0.01), metadata=metadata)
        else:
            call = stream_unary(channel, "/test.Work/Sum")(_requests(3, 0.01), metadata=metadata)
        if index % 2:
            asyncio.get_running_loop().call_later(draw.uniform(0, 1.0), call.cancel)
        return await _status(call)

    async with serving(work, [interceptor]) as channel:
        codes = await asyncio.gather(*(one(index, channel) for index in range(200)))
        await _quiet(interceptor)
        await _serves(channel)
    assert codes.count(grpc.StatusCode.OK) >= 100  # the calls not cancelled all completed
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.CANCELLED}


async def test_a_server_stop_with_calls_queued_and_running_leaves_nothing_held() -> None:
    interceptor = _interceptor(2, long_running={"/test.Work/Chat"})
    work = Hostile()
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers((work.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        calls: list[Any] = [
            unary(channel, "/test.Work/Hold")(b"", metadata=bearer(f"user{i}")) for i in range(6)
        ]
        calls.append(unary_stream(channel, "/test.Work/Flood")(b"", metadata=bearer("slow")))
        calls.append(
            stream_stream(channel, "/test.Work/Chat")(_requests(1, 0), metadata=bearer("c"))
        )
        await _until(lambda: _level_waiting(interceptor) >= 5)
        await server.stop(grace=0.3)
        codes = await asyncio.gather(*(_status(call) for call in calls))
    assert grpc.StatusCode.OK not in codes[:6]  # held past the grace: none completed
    await _quiet(interceptor)
    # Every call reached the limiter and ended once. gRPC cancels the calls one by one: a
    # seat freed by one may go to a queued call before that one is cancelled too.
    level = interceptor.limiter.statistics().priority_levels["work"]
    assert level.dispatched + level.cancelled == len(calls)


async def test_hostile_metadata_as_the_distinguisher_is_bounded_and_counted() -> None:
    config = one_level(2)
    config["flowSchemas"][0]["distinguisherMethod"] = {"type": "ByHeader", "header": "x-tenant"}
    interceptor = APFInterceptor(config=config, identify=identify_bearer)
    sent: list[tuple[tuple[str, str | bytes], ...]] = [
        (("x-tenant", "t" * 7000),),  # near gRPC's 8 KiB soft limit on metadata
        (("x-tenant-bin", b"\xff\x00"),),  # binary, named like the header
        (("x-tenant", "a"), ("x-tenant", "b")),  # repeated
        (*((f"key{i}", "v") for i in range(100)), ("x-tenant", "many")),
        (("x-tenant", ""),),
    ]
    async with serving(Hostile(), [interceptor]) as channel:
        sleep = unary(channel, "/test.Work/Sleep")
        for metadata in sent:
            assert await sleep(b"0", metadata=metadata)
        distinct = [sleep(b"0", metadata=(("x-tenant", f"{i}-" + "z" * 4000),)) for i in range(200)]
        assert all(await asyncio.gather(*distinct))
        await _quiet(interceptor)
    schema = interceptor.limiter.statistics().flow_schemas["callers"]
    assert schema.matched == schema.dispatched == len(sent) + 200


async def test_long_method_names_of_a_catch_all_handler_are_not_kept() -> None:
    # A catch-all generic handler serves any method name a client sends: distinct 6 KB names
    # filled the interceptor's cache of wrapped handlers (4,096 of them: about 30 MB).
    async def echo(request: bytes, context: Context) -> bytes:
        return request

    handler: Any = grpc.unary_unary_rpc_method_handler(echo)

    async def continuation(details: grpc.HandlerCallDetails) -> Any:
        return handler

    class Details:
        def __init__(self, method: str) -> None:
            self.method = method
            self.invocation_metadata = ()

    interceptor = APFInterceptor(config=one_level(1))

    async def wrap(method: str) -> Any:
        details: Any = Details(method)
        return await interceptor.intercept_service(continuation, details)

    for index in range(200):
        wrapped = await wrap(f"/catch.All/{index:04d}" + "x" * 6000)
        assert wrapped is not None and wrapped.unary_unary is not None
    assert len(interceptor._handlers) == 0
    short, again = await wrap("/test.Work/Echo"), await wrap("/test.Work/Echo")
    assert short is again and len(interceptor._handlers) == 1  # real names are kept
