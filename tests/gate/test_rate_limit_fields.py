"""The RateLimit field values the gate computes (draft-ietf-httpapi-ratelimit-headers-10)."""

from __future__ import annotations

from apf_limiter import Limiter, RequestDigest
from apf_limiter.gate import Gate, SlowClients
from apf_limiter.gate._ratelimit import sf_string
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config

NO_RATE = SlowClients(request_timeout=None, min_body_rate=None)


async def test_quota_remaining_and_a_partition_key_per_flow() -> None:
    limiter = Limiter(level_config(limit=4, queues=8, hand_size=2), clock=FakeClock())
    gate = Gate(limiter, slow_clients=NO_RATE)
    alice = gate.start(RequestDigest(user="alice"))
    bob = gate.start(RequestDigest(user="bob"))
    fields = gate.rate_limit("test", "everyone", alice.admission.distinguisher)
    assert fields is not None
    policy, current = fields
    pk = policy.rsplit(";", 1)[1]
    assert policy == f'"test";q=4;qu="concurrent-requests";{pk}'
    assert current == f'"test";r=2;{pk}'  # 4 seats, 2 in use
    other = gate.rate_limit("test", "everyone", bob.admission.distinguisher)
    assert other is not None and other[0].rsplit(";", 1)[1] != pk  # another flow
    again = gate.rate_limit("test", "everyone", "alice", reset=3)
    assert again == (policy, f'"test";r=2;{pk};t=3')  # stable per flow; t on a rejection
    assert gate.rate_limit("exempt", "exempt", "") is None  # no limit to tell
    assert gate.rate_limit("gone", "everyone", "") is None
    alice.end(None)
    bob.end(None)
    assert gate.rate_limit("test", "everyone", "alice") == (policy, f'"test";r=4;{pk}')


def test_a_structured_field_string_is_escaped() -> None:
    assert sf_string("test") == '"test"'
    assert sf_string('a"b\\c') == '"a\\"b\\\\c"'
    assert sf_string("caf\u00e9") == '"caf?"'
