"""APFInterceptor over a real grpc.aio server and client on 127.0.0.1 (raw-bytes methods)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from apf_limiter import Limiter
from apf_limiter.grpc import (
    FLOW_SCHEMA_KEY,
    PRIORITY_LEVEL_KEY,
    QUEUE_WAIT_KEY,
    REASON_KEY,
    RETRY_PUSHBACK_KEY,
    APFInterceptor,
    peer_host,
)
from tests.grpc.server import (
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


def _interceptor(seats: int = 1, **kwargs: Any) -> APFInterceptor:
    config = one_level(seats, **kwargs.pop("level", {}))
    return APFInterceptor(config=config, identify=identify_bearer, **kwargs)


def _level(interceptor: APFInterceptor) -> Any:
    return interceptor.limiter.statistics().priority_levels["work"]


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5.0
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def _trailers(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {key: str(value) for key, value in error.trailing_metadata() or ()}


async def test_admitted_call_carries_the_apf_names() -> None:
    interceptor = _interceptor()
    async with serving(Work(), [interceptor]) as channel:
        call = unary(channel, "/test.Work/Sleep")(b"0", metadata=bearer("alice"))
        assert float(await call) >= 0.0
        trailers = dict(await call.trailing_metadata() or ())
    assert trailers[FLOW_SCHEMA_KEY] == "callers"
    assert trailers[PRIORITY_LEVEL_KEY] == "work"
    assert trailers[QUEUE_WAIT_KEY] == "0"
    assert _level(interceptor).dispatched == 1
    assert _level(interceptor).executing_requests == 0


async def test_every_method_kind_is_admitted() -> None:
    interceptor = _interceptor(metadata=False)
    work = Work()
    work.release.set()
    async with serving(work, [interceptor]) as channel:
        ticks = [m async for m in unary_stream(channel, "/test.Work/Ticks")(b"")]
        total = await stream_unary(channel, "/test.Work/Sum")(iter([b"1", b"2", b"3"]))
        echoed = [m async for m in stream_stream(channel, "/test.Work/Echo")(iter([b"a", b"b"]))]
    assert (ticks, total, echoed) == ([b"first", b"second"], b"6", [b"a", b"b"])
    level = _level(interceptor)
    assert level.dispatched == 3
    assert level.executing_requests == level.waiting_requests == 0


async def test_a_rejection_is_resource_exhausted_with_the_pushback() -> None:
    interceptor = _interceptor(level={"queues": 1, "queue_length": 1})
    work = Work()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        first = hold(b"", metadata=bearer("alice"))  # takes the one seat
        await _until(lambda: work.started == 1, "the first call to run")
        second = hold(b"", metadata=bearer("bob"))  # fills the one queue
        await _until(lambda: _level(interceptor).waiting_requests == 1, "a call to queue")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await hold(b"", metadata=bearer("carol"))
        work.release.set()
        assert await first == await second == b"held"
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = _trailers(refused.value)
    assert trailers[REASON_KEY] == "queue-full"
    assert int(trailers[RETRY_PUSHBACK_KEY]) >= 1000
    assert int(trailers[RETRY_PUSHBACK_KEY]) % 1000 == 0  # whole seconds, as Retry-After
    assert trailers[FLOW_SCHEMA_KEY] == "callers"
    assert trailers[PRIORITY_LEVEL_KEY] == "work"
    assert "queue-full" in (refused.value.details() or "")


async def test_the_wait_limit_ends_in_resource_exhausted_time_out() -> None:
    interceptor = _interceptor(wait_limit=0.2)
    work = Work()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        first = hold(b"", metadata=bearer("alice"))
        await _until(lambda: work.started == 1, "the first call to run")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await hold(b"", metadata=bearer("bob"))
        work.release.set()
        await first
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailers(refused.value)[REASON_KEY] == "time-out"
    assert _level(interceptor).timed_out == 1


async def test_a_call_cancelled_while_queued_frees_its_place() -> None:
    interceptor = _interceptor()
    work = Work()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        first = hold(b"", metadata=bearer("alice"))
        await _until(lambda: work.started == 1, "the first call to run")
        queued = hold(b"", metadata=bearer("bob"))
        await _until(lambda: _level(interceptor).waiting_requests == 1, "a call to queue")
        queued.cancel()
        await _until(lambda: _level(interceptor).waiting_requests == 0, "the place to be freed")
        assert _level(interceptor).cancelled == 1
        assert work.started == 1  # the cancelled call never ran
        work.release.set()
        assert await first == b"held"
        await _until(lambda: _level(interceptor).executing_requests == 0, "the seat to go back")
    level = _level(interceptor)
    assert (level.executing_seats, level.waiting_requests, level.dispatched) == (0, 0, 1)


async def test_the_calls_deadline_bounds_its_wait_as_a_time_out() -> None:
    # grpc-timeout is the call's client deadline: shorter than the wait limit, it takes its
    # place, and the wait ends as the engine's own time-out (not a cancellation).
    interceptor = _interceptor(level={"wait_limit": 30})
    work = Work()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        first = hold(b"", metadata=bearer("alice"))
        await _until(lambda: work.started == 1, "the first call to run")
        began = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await hold(b"", metadata=bearer("bob"), timeout=0.3)
        await _until(lambda: _level(interceptor).waiting_requests == 0, "the place to be freed")
        assert time.monotonic() - began < 5.0  # not the 30 s wait limit
        await _until(lambda: _level(interceptor).timed_out == 1, "the time-out to be counted")
        work.release.set()
        await first
    # The client's own deadline and the server's answer end together: either may win.
    assert late.value.code() in (
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    )
    assert (_level(interceptor).timed_out, _level(interceptor).cancelled) == (1, 0)
    assert work.started == 1  # never dispatched after its client gave up


async def test_without_client_deadlines_grpc_cancels_the_late_wait() -> None:
    interceptor = _interceptor(level={"wait_limit": 30}, client_deadlines=None)
    work = Work()
    async with serving(work, [interceptor]) as channel:
        hold = unary(channel, "/test.Work/Hold")
        first = hold(b"", metadata=bearer("alice"))
        await _until(lambda: work.started == 1, "the first call to run")
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await hold(b"", metadata=bearer("bob"), timeout=0.3)
        await _until(lambda: _level(interceptor).cancelled == 1, "the place to be given up")
        work.release.set()
        await first
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _level(interceptor).timed_out == 0  # Kubernetes' wait limit alone: a cancellation


async def test_a_marked_stream_gives_its_seats_back_at_its_first_message() -> None:
    interceptor = _interceptor(long_running={"/test.Work/Ticks", "/test.Work/Writes"})
    work = Work()
    async with serving(work, [interceptor]) as channel:
        for method in ("/test.Work/Ticks", "/test.Work/Writes"):
            work.release.clear()
            stream = unary_stream(channel, method)(b"", metadata=bearer("alice"))
            assert await stream.read() == b"first"
            # The stream is open, its seat is back: a unary call runs at once.
            await _until(lambda: _level(interceptor).executing_requests == 0, "the seat back")
            reply = await unary(channel, "/test.Work/Sleep")(b"0", metadata=bearer("bob"))
            assert float(reply) < 1.0
            work.release.set()
            assert await stream.read() == b"second"
            assert await stream.code() == grpc.StatusCode.OK


async def test_an_unmarked_stream_holds_its_seat_until_it_ends() -> None:
    interceptor = _interceptor()
    work = Work()
    async with serving(work, [interceptor]) as channel:
        stream = unary_stream(channel, "/test.Work/Ticks")(b"", metadata=bearer("alice"))
        assert await stream.read() == b"first"
        assert _level(interceptor).executing_requests == 1
        queued = unary(channel, "/test.Work/Sleep")(b"0", metadata=bearer("bob"))
        await _until(lambda: _level(interceptor).waiting_requests == 1, "the unary call to queue")
        work.release.set()
        assert await stream.read() == b"second"
        await queued
        await _until(lambda: _level(interceptor).executing_requests == 0, "the seats back")


async def test_a_failing_handler_gives_its_seat_back() -> None:
    interceptor = _interceptor()
    async with serving(Work(), [interceptor]) as channel:
        for _ in range(3):
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await unary(channel, "/test.Work/Fail")(b"", metadata=bearer("alice"))
            assert failed.value.code() == grpc.StatusCode.UNKNOWN
        assert await unary(channel, "/test.Work/Sleep")(b"0") is not None
    level = _level(interceptor)
    assert (level.dispatched, level.executing_requests, level.waiting_requests) == (4, 0, 0)


async def test_the_request_deadline_is_deadline_exceeded_and_frees_the_seat() -> None:
    interceptor = _interceptor(request_timeout=0.2)
    async with serving(Work(), [interceptor]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await unary(channel, "/test.Work/Hold")(b"", metadata=bearer("alice"))
        assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert _trailers(late.value)[PRIORITY_LEVEL_KEY] == "work"
        await _until(lambda: _level(interceptor).executing_requests == 0, "the seat back")


async def test_the_long_running_cap_refuses_one_more_stream() -> None:
    interceptor = _interceptor(long_running={"/test.Work/Ticks"}, max_long_running={"*": 1})
    work = Work()
    async with serving(work, [interceptor]) as channel:
        ticks = unary_stream(channel, "/test.Work/Ticks")
        first = ticks(b"", metadata=bearer("alice"))
        assert await first.read() == b"first"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ticks(b"", metadata=bearer("bob")).read()
        work.release.set()
        assert await first.read() == b"second"
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailers(refused.value)[REASON_KEY] == "long-running-limit"
    assert _trailers(refused.value)[RETRY_PUSHBACK_KEY] == "1000"


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5123", "127.0.0.1"),
        ("ipv6:[::1]:5123", "::1"),
        ("ipv6:%5B::1%5D:5123", "ipv6:%5B::1%5D:5123"),
        ("unix:/tmp/socket", "unix:/tmp/socket"),
        ("", ""),
    ],
)
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="not both"):
        APFInterceptor(limiter=Limiter(), config={})
    with pytest.raises(ValueError, match="collection of names"):
        APFInterceptor(long_running="/a.B/C")
