"""Queues that respect client deadlines (opt-in), through the gate in fake time."""

from __future__ import annotations

import asyncio

import pytest

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter.gate import DEADLINE, ClientDeadlines, Gate, SlowClients, header_timeout
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config

NO_RATE = SlowClients(request_timeout=None, min_body_rate=None)


def _gate(slow_clients: SlowClients = NO_RATE) -> tuple[Gate, Limiter, FakeClock]:
    clock = FakeClock()
    config = level_config(limit=1, queues=1, hand_size=1, queue_length_limit=4)
    limiter = Limiter(config, clock=clock)
    return Gate(limiter, slow_clients=slow_clients), limiter, clock


def _digest(user: str = "alice") -> RequestDigest:
    return RequestDigest(user=user, verb="post", path="/jobs")


async def _outcome(task: asyncio.Task[None]) -> str:
    try:
        await task
    except Rejected as rejected:
        return rejected.reason
    return "admitted"


async def test_a_short_client_deadline_ends_the_wait_as_a_time_out() -> None:
    gate, limiter, clock = _gate()
    assert limiter.config.request_wait_limit == 15.0
    first = gate.start(_digest())
    second = gate.start(_digest("bob"), client_deadline=1.0)
    waiting = asyncio.create_task(second.wait())
    await clock.advance(0.999)
    assert not waiting.done()
    await clock.advance(0.001)
    assert await _outcome(waiting) == "time-out"  # the engine's own rejection: 429
    first.end(None)  # seats free after the client gave up: the request is not dispatched
    second.end(None)
    stats = limiter.statistics()
    assert stats.executing_requests == 0 and stats.waiting_requests == 0


async def test_a_deadline_no_shorter_than_the_wait_limit_changes_nothing() -> None:
    gate, _, clock = _gate()
    first = gate.start(_digest())
    for deadline in (15.0, 20.0, float("nan"), None):
        second = gate.start(_digest("bob"), client_deadline=deadline)
        waiting = asyncio.create_task(second.wait())
        await clock.advance(14.9)
        assert not waiting.done()
        await clock.advance(0.1)
        assert await _outcome(waiting) == "time-out"  # requestWaitLimit, 15 s
        second.end(None)
    first.end(None)


async def test_a_passed_deadline_times_out_at_once() -> None:
    gate, _, clock = _gate()
    first = gate.start(_digest())
    second = gate.start(_digest("bob"), client_deadline=-3.0)
    waiting = asyncio.create_task(second.wait())
    await clock.advance(0)
    assert await _outcome(waiting) == "time-out"
    second.end(None)
    first.end(None)


async def test_the_routes_timeout_bounds_the_wait_as_a_time_out_not_an_expiry() -> None:
    gate, limiter, clock = _gate(SlowClients(request_timeout=60.0, min_body_rate=None))
    first = gate.start(_digest())
    client = gate.client_wait(2.0)  # the route's request timeout
    assert client == 2.0
    seen: list[object] = []

    async def request() -> None:  # the task that runs the request, as a front door's
        second = gate.start(_digest("bob"), request_timeout=2.0, client_deadline=client)
        try:
            await second.wait()
        except Rejected as rejected:
            seen.append(rejected.reason)
        seen.append(second.reason)
        seen.append(second.end(None))

    task = asyncio.create_task(request())
    await clock.advance(2.0)  # the wait limit and the deadline end together
    await task
    # Not expired (no 504, no cancellation): answered 429, the engine counts a time-out.
    assert seen == ["time-out", None, False]
    first.end(None)
    assert limiter.statistics().executing_requests == 0


async def test_dispatched_at_its_deadline_it_expires_before_running() -> None:
    gate, limiter, clock = _gate(SlowClients(request_timeout=2.0, min_body_rate=None))
    seen: dict[str, list[object]] = {"alice": [], "bob": []}

    async def request(user: str) -> None:
        ticket = gate.start(_digest(user), client_deadline=gate.client_wait(None))
        error: BaseException | None = None
        try:
            if not ticket.admitted:
                await ticket.wait()
            await asyncio.sleep(10)  # the work: the expiry cancels it
            seen[user].append("ran")
        except BaseException as exc:
            error = exc
        seen[user].extend((ticket.end(error), ticket.reason))

    alice = asyncio.create_task(request("alice"))
    await clock.advance(0)
    bob = asyncio.create_task(request("bob"))
    await clock.advance(0)
    # At 2 s alice's deadline passes (her seats go back) in the very instant bob's deadline
    # and client deadline pass: bob is not dispatched to run after his client gave up.
    await clock.advance(2.0)
    await asyncio.gather(alice, bob)
    assert seen == {"alice": [True, DEADLINE], "bob": [True, DEADLINE]}
    assert limiter.statistics().executing_requests == 0


async def test_client_wait_takes_the_shortest_known() -> None:
    gate, _, _ = _gate(SlowClients(request_timeout=30.0, min_body_rate=None))
    assert gate.client_wait(None) == 30.0  # the gate's default
    assert gate.client_wait(None, 0.5, None) == 0.5
    assert gate.client_wait(float("inf")) is None
    assert gate.client_wait(float("inf"), None) is None
    assert gate.client_wait(3.0, 4.0) == 3.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"1500", 1.5),
        ("250", 0.25),
        (b" 42 ", 0.042),
        (b"9999999999", 9999999.999),
        (b"0", None),
        (b"", None),
        (None, None),
        (b"-5", None),
        (b"1e3", None),
        (b"12.5", None),
        ("\u0663", None),  # an Arabic-Indic digit: not ASCII
        (b"99999999999", None),  # 11 digits
        (b"1" * 1000, None),  # bounded: not parsed at all
        (b"0x10", None),
    ],
)
def test_header_timeout_ignores_hostile_values(
    value: str | bytes | None, seconds: float | None
) -> None:
    assert header_timeout(value) == seconds


def test_client_deadlines_checks_the_header_name() -> None:
    assert ClientDeadlines(header="x-envoy-expected-rq-timeout-ms").header is not None
    for bad in ("", "bad header", "x\r\ny", "é", "x" * 300):
        with pytest.raises(ValueError, match="header name"):
            ClientDeadlines(header=bad)
