"""Random traffic with deadlines, slow bodies and cancellations, in fake time: no seat is lost.

Each seed mixes requests that finish, hang, stream then hang, read a trickling body, swallow
their cancellation or fail, with clients that leave while queued and a server that cancels
some request tasks, under random request deadlines (route, level, default). Afterwards every
seat is back, nothing waits, and every response is well formed: one start at most, and a 504
or 408 only where nothing had been sent.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, RouteOptions
from apf_limiter.asgi._types import Message, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope

pytestmark = pytest.mark.timeout(120)

BEHAVIOURS = ("finish", "hang", "stream", "read", "swallow", "fail")


def _sleep(clock: FakeClock, seconds: float) -> asyncio.Future[None]:
    done = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not done.done():
            done.set_result(None)

    clock.call_later(seconds, wake)
    return done


def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()


def _app(clock: FakeClock) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        behaviour = scope["path"].split("/")[1]
        start: Message = {"type": "http.response.start", "status": 200, "headers": []}
        if behaviour == "finish":
            await _sleep(clock, 0.5)
        elif behaviour == "hang":
            await asyncio.Event().wait()
        elif behaviour == "stream":
            await send(start)
            await send({"type": "http.response.body", "body": b"a", "more_body": True})
            await asyncio.Event().wait()
        elif behaviour == "read":
            while (await receive()).get("more_body"):
                pass
        elif behaviour == "swallow":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                return
        else:
            await _sleep(clock, 0.2)
            raise RuntimeError("fail")
        await send(start)
        await send({"type": "http.response.body", "body": b"done"})

    return app


@pytest.mark.parametrize("seed", range(12))
async def test_random_traffic_with_deadlines_loses_no_seat(seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    limiter = Limiter(level_config(limit=3, queue_length_limit=8, wait_limit=4), clock=clock)
    middleware = APFMiddleware(
        _app(clock),
        limiter=limiter,
        request_timeout=rng.choice([None, 1.5, 3.0]),
        request_timeout_by_level=rng.choice([None, {"test": 2.5}]),
        paths={"/hang": RouteOptions(request_timeout=rng.choice([1.0, 6.0]))},
        min_body_rate=rng.choice([None, 50.0]),
        body_rate_grace=1.0,
        max_body_buffer=rng.choice([0, 600, 65536]),
        max_total_body_buffer=rng.choice([1000, 1 << 20]),
    )
    drivers: list[Driver] = []
    tasks: list[asyncio.Task[None]] = []
    for _ in range(40):
        await clock.advance(rng.uniform(0, 0.4))
        behaviour = rng.choice(BEHAVIOURS)
        driver = Driver()
        if behaviour == "read":
            chunks = rng.randint(1, 6)
            for k in range(chunks):
                message = {"type": "http.request", "body": b"x" * 40, "more_body": k < chunks - 1}
                clock.call_later(k * rng.uniform(0.1, 2.0), driver.incoming.put_nowait, message)
        else:
            driver.incoming.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        if rng.random() < 0.15:  # the client leaves (noticed while queued, if watched)
            clock.call_later(
                rng.uniform(0, 3), driver.incoming.put_nowait, {"type": "http.disconnect"}
            )
        headers = [(b"x-user", f"u{rng.randrange(5)}".encode())]
        if behaviour == "read":
            headers.append((b"content-length", b"240"))
        scope = http_scope(f"/{behaviour}", method="POST", headers=headers)
        task = asyncio.create_task(middleware(scope, driver.receive, driver.send))
        if rng.random() < 0.1:  # the server cancels it (shutting down, say)
            clock.call_later(rng.uniform(0, 4), _cancel, task)
        drivers.append(driver)
        tasks.append(task)
    await clock.advance(30)
    for task in tasks:  # deadlines off, or their clients hang: the server ends them
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    statistics = limiter.statistics()
    level = statistics.priority_levels["test"]
    assert (level.executing_requests, level.executing_seats, level.waiting_requests) == (0, 0, 0)
    assert middleware._body_budget.kept == 0
    for driver in drivers:
        starts = [m["status"] for m in driver.sent if m["type"] == "http.response.start"]
        assert len(starts) <= 1
        if starts and starts[0] in (504, 408):
            assert len(driver.sent) == 2  # nothing had been sent before
