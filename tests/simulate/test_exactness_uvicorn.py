"""``simulate`` against a real uvicorn server in shadow mode, in real time, to a loose tolerance.

The same check as ``test_exactness_server.py``, over HTTP: the real ``APFMiddleware`` under
uvicorn on 127.0.0.1, a handler that sleeps for each request's service time, a real client
sending each request at its time, and the limiter's real clock. Real time drifts by
milliseconds (the client, the loop, the socket), so the trace keeps every event at least
0.15 s from every other, the simulation is given the arrivals as the server saw them, and a
wait must match to within 0.1 s (the rejection reason exactly). Retry-After is left to the
fake-time tests: it counts rejections per second of the real clock.
"""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.asgi import APFMiddleware, Identity, IdentityHooks
from apf_limiter.asgi._types import Receive, Scope, Send
from tests.asgi.server import serve, wait_until
from tests.limiter.test_shadow_equivalence import _config
from tests.simulate.test_exactness import _simulated
from tests.simulate.test_exactness_server import _header

pytestmark = pytest.mark.timeout(60)

SCALE = 1.5  # seconds of real time per unit of the trace below
# (arrival, user, service): one level of 2 seats and a queue of 3; the wait limit is 1.2. The
# first two run at once; the next three queue (two run when seats free, one times out); two
# find the queue full; later ones wait less than the limit, and the last runs at once.
TRACE = [
    (0.0, "u1", 1.0),
    (0.1, "u2", 1.0),
    (0.2, "u3", 0.9),
    (0.3, "u4", 0.9),
    (0.4, "u5", 0.6),
    (0.5, "u6", 0.6),
    (0.6, "u1", 0.4),
    (1.45, "u2", 0.3),
    (1.55, "u3", 0.3),
    (2.6, "u4", 0.2),
]
WAIT_LIMIT = 1.2


async def _serve(
    config: dict[str, object],
) -> tuple[list[float], list[tuple[float | None, str | None]]]:
    limiter = Limiter({**config, "enforcement": "Shadow"}, hash_seed=42)
    clock = limiter.clock
    arrived = [-1.0] * len(TRACE)
    admissions: list[object] = [None] * len(TRACE)

    def identify(scope: Scope) -> Identity:
        arrived[int(_header(scope, b"x-index"))] = clock.now()
        return Identity(_header(scope, b"x-user"))

    async def hold(scope: Scope, receive: Receive, send: Send) -> None:
        index = int(_header(scope, b"x-index"))
        admissions[index] = scope["state"]["apf"]
        await asyncio.sleep(TRACE[index][2] * SCALE)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = APFMiddleware(hold, limiter=limiter, identity=IdentityHooks(identify=identify))
    loop = asyncio.get_running_loop()
    async with serve(app, lifespan="off") as url, httpx.AsyncClient(base_url=url) as client:
        began = loop.time() + 0.2

        async def one(index: int) -> None:
            at, user, _ = TRACE[index]
            await asyncio.sleep(began + at * SCALE - loop.time())
            response = await client.get("/alpha", headers={"x-index": str(index), "x-user": user})
            assert response.status_code == 200  # shadow mode: every request runs

        await asyncio.gather(*(one(index) for index in range(len(TRACE))))

        def settled() -> bool:
            level = limiter.statistics().priority_levels["alpha"]
            return level.waiting_requests == 0 and level.executing_requests == 0

        await wait_until(settled, timeout=10)  # twins that outlived their requests end
    told = []
    for admission in admissions:
        outcome = getattr(admission, "shadow", None)
        assert outcome is not None and outcome.decided
        told.append((outcome.queue_wait, outcome.reject_reason))
    return arrived, told


def test_simulate_gives_each_request_what_a_uvicorn_server_in_shadow_mode_says() -> None:
    config = _config(3, WAIT_LIMIT * SCALE, [(10, 0, False, 1)])
    config["borrowingPeriod"] = 60.0  # one level: nothing to borrow
    arrived, told = asyncio.run(_serve(config))
    first = arrived[0]
    arrivals = [
        (at - first, "trace", RequestDigest(user=user, path="/alpha"), service * SCALE)
        for at, (_, user, service) in zip(arrived, TRACE, strict=True)
    ]
    simulated = _simulated(config, arrivals)
    for index, ((wait, reason), outcome) in enumerate(zip(told, simulated, strict=True)):
        assert reason == outcome.reason, (index, wait, reason, outcome)
        if reason is None:
            assert wait is not None and outcome.wait is not None
            assert math.isclose(wait, outcome.wait, abs_tol=0.1), (index, wait, outcome)
    kinds = {o.reason or ("waited" if o.wait else "at once") for o in simulated}
    assert kinds == {"at once", "waited", "queue-full", "time-out"}
