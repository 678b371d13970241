"""``simulate`` gives each request what a live server in shadow mode says enforcing would give it.

The live server: the real :class:`~apf_limiter.asgi.APFMiddleware` in front of an ASGI
application whose handler holds each request for its service time, on a
:class:`~apf_limiter.testing.FakeClock`, driven by ASGI calls (``tests/asgi/driver.py``). The
configuration says ``enforcement: Shadow``, so every request runs at once and its virtual twin
is held in the engine as an enforced request would be. Who sent a request and its work
estimate come from request headers, through the middleware's ``identify`` and ``estimate``
hooks, as a deployment would read them.

Each request's would-be outcome is read twice, and both must equal the simulation's:

* from the limiter's observer: ``request_shadowed`` (its wait, or its rejection reason), told
  at the moment the outcome is known. Events carry no request identity; the moment does: a
  request that would have run was dispatched its wait after its arrival, one rejected on
  arrival was rejected then, one timed out ``requestWaitLimit`` after it. Every arrival of a
  trace is microseconds apart from every other, so each event names one request;
* from its ``Admission`` (``scope["state"]["apf"]``, what the middleware hands the
  application), read once every twin has ended: ``Admission.shadow`` carries the Retry-After
  that a rejection would have had, which the observer event does not.

(The ``X-APF-Shadow`` response header cannot serve: it is written as the response starts,
when a queued twin's outcome may not be known yet.)
"""

from __future__ import annotations

import asyncio
import bisect
import math
from typing import Any

from apf_limiter import Limiter, RequestDigest
from apf_limiter._observer import Observer
from apf_limiter._simulate._run import Outcome
from apf_limiter.asgi import APFMiddleware, Identity, IdentityHooks, WorkEstimate
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.driver import Driver, http_scope
from tests.limiter.test_shadow_equivalence import _config, random_traces
from tests.limiter.test_shadow_equivalence import _trace as make_trace
from tests.simulate.test_exactness import _arrivals, _simulated, _trace_of

# A request's would-be outcome: its wait, or its rejection reason and Retry-After.
Told = tuple[float | None, str | None, int | None]


class _Shadowed(Observer):
    """Records each ``request_shadowed`` event with the fake time it came at."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.events: list[tuple[float, str, float | None, str | None]] = []

    def request_shadowed(
        self, priority_level: str, flow_schema: str, queue_wait: float | None, reason: str | None
    ) -> None:
        self.events.append((self.clock.now(), priority_level, queue_wait, reason))


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("ascii"))
    raise AssertionError(f"no {name!r} header")


def _identify(scope: Scope) -> Identity:
    return Identity(_header(scope, b"x-user"))


def _estimate(scope: Scope) -> WorkEstimate:
    return WorkEstimate(
        int(_header(scope, b"x-seats")),
        int(_header(scope, b"x-final-seats")),
        float(_header(scope, b"x-additional-latency")),
    )


def _scope(index: int, digest: RequestDigest, service: float) -> Scope:
    headers = {
        b"x-index": str(index),
        b"x-user": digest.user,
        b"x-seats": str(digest.seats or 1),
        b"x-final-seats": str(digest.final_seats),
        # repr: the float goes through the header and back exactly.
        b"x-additional-latency": repr(digest.additional_latency),
        b"x-service": repr(service),
    }
    return http_scope(
        digest.path,
        method=digest.verb.upper(),
        headers=[(k, v.encode("ascii")) for k, v in headers.items()],
    )


async def _serve(
    config: dict[str, Any], arrivals: list[tuple[float, str, RequestDigest, float]]
) -> tuple[list[Told], list[Told]]:
    """The arrivals through the middleware in shadow mode: what the observer and admissions tell."""
    clock = FakeClock()
    observer = _Shadowed(clock)
    limiter = Limiter(
        {**config, "enforcement": "Shadow"}, clock=clock, hash_seed=42, observer=observer
    )
    admissions: list[Any] = [None] * len(arrivals)

    async def hold(scope: Scope, receive: Receive, send: Send) -> None:
        # The handler: holds the request for its service time, then answers.
        admissions[int(_header(scope, b"x-index"))] = scope["state"]["apf"]
        await clock.sleep(float(_header(scope, b"x-service")))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = APFMiddleware(
        hold, limiter=limiter, identity=IdentityHooks(identify=_identify, estimate=_estimate)
    )
    drivers = [Driver() for _ in arrivals]

    async def one(index: int) -> None:
        at, _, digest, service = arrivals[index]
        await clock.sleep(at)
        driver = drivers[index]
        await middleware(_scope(index, digest, service), driver.receive, driver.send)

    tasks = [asyncio.ensure_future(one(index)) for index in range(len(arrivals))]
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    await clock.run_until_idle()  # twins that outlived their requests end
    for level in limiter.statistics().priority_levels.values():
        assert level.waiting_requests == 0 and level.executing_requests == 0
    # Shadow mode: every request ran, at once.
    assert all(driver.start()["status"] == 200 for driver in drivers)

    told: list[Told] = []
    for admission in admissions:
        outcome = admission.shadow
        assert outcome is not None and outcome.decided
        told.append((outcome.queue_wait, outcome.reject_reason, outcome.retry_after))

    # The observer's events, each given to the request whose arrival it implies.
    starts = [at for at, _, _, _ in arrivals]
    wait_limit = float(config["requestWaitLimit"])
    observed: list[Told | None] = [None] * len(arrivals)
    for now, _, wait, reason in observer.events:
        if wait is not None:
            arrived = now - wait
        elif reason == "time-out":
            arrived = now - wait_limit
        else:
            arrived = now
        index = _nearest(starts, arrived)
        assert observed[index] is None, ("two events for one request", index)
        observed[index] = (wait, reason, None)
    assert all(outcome is not None for outcome in observed)
    return told, [outcome for outcome in observed if outcome is not None]


def _nearest(starts: list[float], at: float) -> int:
    index = bisect.bisect_left(starts, at)
    best = min(
        (i for i in (index - 1, index) if 0 <= i < len(starts)),
        key=lambda i: abs(starts[i] - at),
    )
    assert abs(starts[best] - at) < 1e-7, ("no arrival at", at)
    return best


def _same(told: list[Told], simulated: list[Outcome], *, retry_after: bool = True) -> None:
    assert len(told) == len(simulated)
    for index, ((wait, reason, after), outcome) in enumerate(zip(told, simulated, strict=True)):
        assert reason != "dropped", index
        if reason is None:
            assert outcome.reason is None and outcome.wait is not None, (index, wait, outcome)
            assert wait is not None
            # The rounding of tests/simulate/test_exactness.py: a twin's run time is float
            # seconds, set again on the clock in whole nanoseconds.
            assert math.isclose(wait, outcome.wait, abs_tol=3e-9), (index, wait, outcome)
        else:
            assert wait is None and outcome.reason == reason, (index, reason, outcome)
            if retry_after:
                assert after == outcome.retry_after, (index, after, outcome)


def _check(
    config: dict[str, Any], arrivals: list[tuple[float, str, RequestDigest, float]]
) -> list[Outcome]:
    told, observed = asyncio.run(_serve(config, arrivals))
    simulated = _simulated(config, arrivals)
    _same(told, simulated)
    _same(observed, simulated, retry_after=False)
    return simulated


@random_traces(150)
def test_simulate_gives_each_request_what_a_shadow_server_says(
    server_limit: int,
    wait_limit: float,
    shapes: list[tuple[int, int, bool, int]],
    raw: list[tuple[int, int, int, int, int, int, int]],
) -> None:
    config = _config(server_limit, wait_limit, shapes)
    _check(config, _arrivals(make_trace(raw, len(shapes))))


def test_a_crowded_trace_through_the_server_is_the_same_simulated() -> None:
    shapes = [(10, 50, False, 2), (10, 90, False, 1), (5, 0, True, 1)]
    raw = [
        (17 * i % 90, i % 3, i % 6, 1 + i % 3, i * 7 % 4, (0, 150, 900)[i % 3], 300 + 97 * i % 900)
        for i in range(40)
    ]
    config = _config(4, 1.5, shapes)
    simulated = _check(config, _arrivals(make_trace(raw, 3)))
    kinds = {o.reason or "ran" for o in simulated}
    assert {"ran", "queue-full", "concurrency-limit", "time-out"} <= kinds
    assert any(o.wait is not None and o.wait > 0 for o in simulated)


def test_a_scenario_through_the_server_is_the_same_simulated() -> None:
    # The flooding scenario of tests/simulate/test_exactness.py, several hundred requests.
    config, arrivals = _trace_of()
    simulated = _check(config, arrivals)
    assert len(simulated) > 300
    assert {"ran", "queue-full", "concurrency-limit", "time-out"} <= {
        o.reason or "ran" for o in simulated
    }
