"""The request gate on its own, in fake time: admit, queue, refuse, abandon, expire, cap, end."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.gate import BODY, DEADLINE, Gate, SlowClients
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config

NO_RATE = SlowClients(request_timeout=None, min_body_rate=None)


def _gate(limit: int = 1, **kwargs: object) -> tuple[Gate, Limiter, FakeClock]:
    clock = FakeClock()
    limiter = Limiter(
        level_config(limit=limit, queues=1, hand_size=1, queue_length_limit=1), clock=clock
    )
    return Gate(limiter, **kwargs), limiter, clock  # type: ignore[arg-type]


def _digest(user: str = "alice") -> RequestDigest:
    return RequestDigest(user=user, verb="post", path="/jobs")


async def test_free_seats_admit_at_once_with_the_metadata() -> None:
    gate, limiter, _ = _gate(slow_clients=NO_RATE)
    ticket = gate.start(_digest())
    assert ticket.admitted and not ticket.tracked
    assert (ticket.flow_schema, ticket.priority_level) == ("everyone", "test")
    assert ticket.queue_wait == 0.0 and ticket.shadow is None
    assert limiter.statistics().executing_requests == 1
    assert ticket.end(None) is False
    assert limiter.statistics().executing_requests == 0


async def test_end_releases_only_what_is_still_held() -> None:
    gate, limiter, _ = _gate(slow_clients=NO_RATE)
    ticket = gate.start(_digest())
    assert not ticket.released
    ticket.release()  # the response completed: the seats go back now
    assert ticket.released and limiter.statistics().executing_requests == 0
    assert ticket.end(None) is False  # nothing left to release
    # A front door that released through the admission itself says so; end() then skips it.
    other = gate.start(_digest("bob"))
    other.admission.release()
    other.released = True
    assert other.end(None) is False and limiter.statistics().executing_requests == 0
    # Not released before end(): end() gives the seats back.
    third = gate.start(_digest("carol"))
    assert limiter.statistics().executing_requests == 1
    assert third.end(None) is False and third.released
    assert limiter.statistics().executing_requests == 0


async def test_a_cancelled_wait_holds_nothing() -> None:
    gate, limiter, clock = _gate(slow_clients=NO_RATE)
    first = gate.start(_digest())
    second = gate.start(_digest("bob"))
    assert not second.admitted
    waiting = asyncio.create_task(second.wait())
    await clock.advance(0)
    assert limiter.statistics().waiting_requests == 1
    waiting.cancel()  # the front door's client left
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert second.end(None) is False
    assert limiter.statistics().waiting_requests == 0
    first.end(None)
    assert limiter.statistics().executing_requests == 0


async def test_abandon_gives_up_a_queued_request() -> None:
    gate, limiter, _ = _gate(slow_clients=NO_RATE)
    first = gate.start(_digest())
    second = gate.start(_digest("bob"))
    second.abandon()
    assert limiter.statistics().waiting_requests == 0
    first.end(None)
    second.end(None)
    assert limiter.statistics().executing_requests == 0


async def test_a_full_queue_is_refused_with_retry_after() -> None:
    gate, _, _ = _gate(slow_clients=NO_RATE)
    gate.start(_digest())
    gate.start(_digest())  # one queue, of length 1
    with pytest.raises(Rejected) as refused:
        gate.start(_digest())
    assert refused.value.reason == "queue-full" and refused.value.retry_after >= 1
    assert refused.value.flow_schema == "everyone"


async def test_the_deadline_cancels_the_work_and_gives_the_seats_back() -> None:
    gate, limiter, clock = _gate(slow_clients=SlowClients(request_timeout=2.0))
    outcome: list[bool] = []

    async def front_door() -> None:
        ticket = gate.start(_digest())
        error: BaseException | None = None
        try:
            await asyncio.sleep(3600)
        except BaseException as exc:
            error = exc
        outcome.append(ticket.end(error))
        assert ticket.reason == DEADLINE

    task = asyncio.create_task(front_door())
    await clock.advance(1.9)
    assert limiter.statistics().executing_requests == 1
    await clock.advance(0.2)
    await task  # the cancellation the deadline caused ends at the front door
    assert outcome == [True]
    assert limiter.statistics().executing_requests == 0


async def test_a_slow_body_expires_by_bytes_over_time() -> None:
    gate, _, clock = _gate(slow_clients=SlowClients(min_body_rate=100.0, grace=1.0))
    outcome: list[bool] = []

    async def front_door() -> None:
        ticket = gate.start(_digest())
        body = ticket.body_clock()
        assert body is not None
        body.waiting()
        error: BaseException | None = None
        try:
            await asyncio.sleep(3600)  # the client sends nothing
        except BaseException as exc:
            error = exc
            body.received(0, complete=False)
        outcome.append(ticket.end(error))
        assert ticket.reason == BODY

    task = asyncio.create_task(front_door())
    await clock.advance(1.5)  # grace 1 s, then 100 bytes/s: due at 1 s with nothing received
    await task
    assert outcome == [True]


async def test_a_long_running_request_gives_its_seats_back_as_it_starts() -> None:
    gate, limiter, clock = _gate(slow_clients=SlowClients(request_timeout=1.0))
    ticket = gate.start(_digest(), long_running=True)
    ticket.response_started()
    assert limiter.statistics().executing_requests == 0
    await clock.advance(5)  # no deadline once started
    assert ticket.reason is None
    assert ticket.end(None) is False


async def test_the_long_running_cap_refuses_and_counts_out_at_end() -> None:
    gate, _, _ = _gate(limit=4, slow_clients=NO_RATE, max_long_running={"*": 1})
    ticket = gate.start(_digest(), long_running=True)
    assert gate.open_long_running("everyone") == 1
    with pytest.raises(Rejected) as refused:
        gate.start(_digest("bob"), long_running=True)
    assert refused.value.reason == "long-running-limit"
    ticket.end(None)
    assert gate.open_long_running("everyone") == 0
    gate.start(_digest("bob"), long_running=True).end(None)


def test_the_gate_checks_its_options() -> None:
    assert isinstance(_gate()[0], Gate)
    with pytest.raises(TypeError, match="SlowClients"):
        Gate(Limiter(), slow_clients={"request_timeout": 1})  # type: ignore[arg-type]


async def test_the_custom_front_door_example_over_loopback() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "custom_front_door.py"
    spec = importlib.util.spec_from_file_location("apf_example_custom_front_door", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    gate = Gate(Limiter(level_config(limit=1, queues=1, hand_size=1, queue_length_limit=1)))
    server = await example.start_server(gate)
    port = server.sockets[0].getsockname()[1]
    async with server:
        connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for _, writer in connections:
            writer.write(b"alice /jobs\n")  # one queue, of length 1
            await writer.drain()
        answers = [
            (await asyncio.wait_for(reader.readline(), 10)).decode() for reader, _ in connections
        ]
        for _, writer in connections:
            writer.close()
    assert answers[0].startswith("ok everyone test wait=0.000"), answers
    assert answers[1].startswith("ok everyone test wait="), answers  # queued, then admitted
    assert answers[2].startswith("refused queue-full retry-after="), answers
