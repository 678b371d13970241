"""Mice and an elephant over real gRPC: APF keeps the mice's waits short, a FIFO does not.

The gRPC twin of the HTTP fairness run (``benchmarks/fairness_bench.py``'s ``http``, load
:class:`~benchmarks.fairness_http.HttpLoad`), measured the same way: one server of 8 seats;
an elephant keeping 64 calls in flight (closed loop) and 10 mice calling at 2 calls/s each
(Poisson, open loop: every call its own task), all from the start; service times uniform in
50-150 ms, the same draws for both servers; the calls *sent* in the first 3 s are not counted
(the warm-up). The same load runs against :class:`~apf_limiter.grpc.APFInterceptor` (one level,
64 queues, hands of 6, fair per user: the HTTP benchmark's configuration) and against an
``asyncio.Semaphore`` of 8 (one FIFO line). The wait is the server's own: from the call's
arrival (the outermost interceptor) to its handler's start.

The run is 12 s per server (the test's time box), 191 counted mouse calls: their p99 is the
2nd largest wait, a coarse estimate. Eight runs of this test on the shared 2-core host gave an
APF / FIFO p99 ratio of 0.118-0.179 (median ratio 0.012-0.018); the HTTP run's 20 s rounds
give 0.090-0.118. The issue's 0.10 holds over HTTP with 60 s rounds and in fake time
(``tests/test_fairness_targets.py``, 55 counted seconds), not on 9 s here: the p99 bound stays
0.25, the median's is 0.10. Why, in docs/grpc.md ("Fairness").
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass, replace

import grpc
import pytest

from apf_limiter.grpc import APFInterceptor
from benchmarks.fairness_http import HttpLoad
from benchmarks.fairness_sim import percentile
from tests.grpc.server import (
    Work,
    bearer,
    identify_bearer,
    one_level,
    serving,
    unary,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

SEATS = 8
LOAD = replace(HttpLoad(), duration=12.0)  # 64 elephant calls in flight, 10 mice of 2/s
WARM_UP = 3.0  # fairness_bench's --http-warmup: calls sent before it are not counted
QUEUE_WAIT_KEY = "x-apf-queue-wait"


@dataclass(frozen=True, slots=True)
class MouseCall:
    """One mouse call: when it was sent (since the run began), and its waits in seconds."""

    sent: float
    wait: float  # the server's, arrival to handler start
    queue_wait: float  # APF's own, in the trailing metadata (nan behind the semaphore)


def _service_ms(stream: random.Random) -> bytes:
    mean = LOAD.service_time
    return str(round(stream.uniform(0.5 * mean, 1.5 * mean) * 1000)).encode()


async def _run(fair: bool) -> list[MouseCall]:
    """The mice's calls under APF (``fair``) or a FIFO semaphore, warm-up included."""
    if fair:
        config = one_level(SEATS, queue_length=50, wait_limit=60)
        interceptor = APFInterceptor(config=config, identify=identify_bearer, metadata=True)
        work, interceptors = Work(), [interceptor]
    else:
        work, interceptors = Work(asyncio.Semaphore(SEATS)), []
    calls: list[MouseCall] = []
    async with (
        serving(work, interceptors) as channel,
        grpc.aio.insecure_channel(f"127.0.0.1:{work.port}") as mice_channel,
    ):
        began = time.monotonic()
        stop = began + LOAD.duration
        elephant = unary(channel, "/test.Work/Sleep")
        mouse_call = unary(mice_channel, "/test.Work/Sleep")

        async def trunk(slot: int) -> None:
            stream = random.Random(f"{LOAD.seed}/elephant/{slot}")
            while time.monotonic() < stop:
                await elephant(_service_ms(stream), metadata=bearer("elephant"), timeout=60)

        async def one_mouse_call(user: str, request: bytes) -> None:
            sent = time.monotonic() - began
            call = mouse_call(request, metadata=bearer(user), timeout=60)
            wait = float(await call)
            trailing = dict(await call.trailing_metadata() or ())
            queue_wait = float(trailing.get(QUEUE_WAIT_KEY, "nan"))
            calls.append(MouseCall(sent, wait, queue_wait))

        async def mouse(n: int) -> None:
            stream = random.Random(f"{LOAD.seed}/mouse-{n}")
            spawned: list[asyncio.Task[None]] = []
            while True:
                await asyncio.sleep(stream.expovariate(LOAD.mouse_rate))
                if time.monotonic() >= stop:
                    break
                call = one_mouse_call(f"mouse-{n}", _service_ms(stream))
                spawned.append(asyncio.create_task(call))
            await asyncio.gather(*spawned)

        await asyncio.gather(
            *(trunk(slot) for slot in range(LOAD.elephant_concurrency)),
            *(mouse(n) for n in range(LOAD.mice)),
        )
    return calls


def _counted(calls: list[MouseCall]) -> list[MouseCall]:
    return [c for c in calls if c.sent >= WARM_UP]


async def test_mice_waits_behind_apf_are_a_fraction_of_fifo() -> None:
    fifo = _counted(await _run(fair=False))
    apf = _counted(await _run(fair=True))
    # 10 mice x 2/s x 9 counted seconds: ~180 calls each.
    assert len(fifo) > 120 and len(apf) > 120
    fifo_waits, apf_waits = [c.wait for c in fifo], [c.wait for c in apf]
    fifo_p99, apf_p99 = percentile(fifo_waits, 0.99), percentile(apf_waits, 0.99)
    assert fifo_p99 > 0.7  # the mice queue behind the elephant's ~56 waiting calls
    assert statistics.median(apf_waits) <= 0.10 * statistics.median(fifo_waits)
    # The 0.10 holds over 60 s of load; 9 s here give 0.118-0.179 (docs/grpc.md).
    assert apf_p99 <= 0.25 * fifo_p99, (apf_p99, fifo_p99)
    # The mice's waits are APF's queue waits: the interceptor adds next to nothing to them
    # (no classification into the elephant's flow, no serialization before admission).
    overheads = [c.wait - c.queue_wait for c in apf]
    assert statistics.median(overheads) < 0.005, statistics.median(overheads)
