"""The long-running cap at a shadow level refuses nothing; it reports what it would have done
(issue 28, item 9): the request runs and counts, its shadow outcome is the would-be refusal,
and observers count a would-be ``long-running-limit`` rejection, not a real one."""

from __future__ import annotations

from typing import Any

from apf_limiter import Limiter, RequestDigest
from apf_limiter.gate import Gate, SlowClients
from apf_limiter.observability import Observer
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config

NO_RATE = SlowClients(request_timeout=None, min_body_rate=None)


class _Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def request_rejected(self, *args: Any) -> None:
        self.events.append(("rejected", *args))

    def request_shadowed(
        self, priority_level: str, flow_schema: str, queue_wait: float | None, reason: str | None
    ) -> None:
        self.events.append(("shadowed", priority_level, flow_schema, queue_wait, reason))


def _digest(user: str) -> RequestDigest:
    return RequestDigest(user=user, verb="get", path="/events")


async def test_over_the_cap_at_a_shadow_level_the_request_runs_and_is_reported() -> None:
    recorder = _Recorder()
    config = {**level_config(limit=4, queues=1, hand_size=1), "enforcement": "Shadow"}
    limiter = Limiter(config, clock=FakeClock(), observer=recorder)
    gate = Gate(limiter, slow_clients=NO_RATE, max_long_running={"*": 1})
    first = gate.start(_digest("alice"), long_running=True)
    assert first.shadow == "wait=0"
    second = gate.start(_digest("bob"), long_running=True)  # over the cap: not refused
    assert second.admitted
    assert second.shadow == "rejected=long-running-limit; retry-after=1"
    assert gate.open_long_running("everyone") == 2  # it is open: it counts
    assert [e for e in recorder.events if e[0] == "rejected"] == []
    assert ("shadowed", "test", "everyone", None, "long-running-limit") in recorder.events
    second.end(None)
    first.end(None)
    assert gate.open_long_running("everyone") == 0
    assert limiter.statistics().executing_requests == 0
