"""The adaptive server limit in the shell: sampling at finish, applying on housekeeping."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config

DIGEST = RequestDigest(user="u", groups=("g",), path="/p")


def _config(limit: int = 10, **adaptive: Any) -> dict[str, Any]:
    settings = {"minLimit": 2, "maxLimit": 40, "smoothing": 1.0, **adaptive}
    return {
        **single_level_config(limit=limit, queue_length_limit=100),
        "adaptiveConcurrency": settings,
    }


async def _wave(limiter: Limiter, clock: FakeClock, count: int, hold: float) -> None:
    """``count`` requests at once, each running ``hold`` seconds once admitted."""

    async def one() -> None:
        async with limiter.admit(DIGEST):
            await clock.sleep(hold)

    tasks = [asyncio.create_task(one()) for _ in range(count)]
    while not all(task.done() for task in tasks):
        await clock.advance(0.01)
    await asyncio.gather(*tasks)


def _server_limit(limiter: Limiter) -> int:
    return limiter.statistics().server_concurrency_limit


async def test_off_the_server_limit_never_moves() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=10), clock=clock)
    assert limiter.adaptive_concurrency is None
    await _wave(limiter, clock, 20, 0.1)
    await _wave(limiter, clock, 20, 1.0)
    await clock.advance(2)
    limiter.run_due()
    assert _server_limit(limiter) == 10


async def test_slower_execution_lowers_the_limit_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    # 10 at a time run 0.1 s (the baseline) while others wait: the limit may grow.
    await _wave(limiter, clock, 30, 0.1)
    assert _server_limit(limiter) == 10  # the first update is due at 1 s
    await clock.advance_to(0.95)
    await _wave(limiter, clock, 30, 0.1)  # the update runs at 1.05 s, 20 waiting
    grown = _server_limit(limiter)
    assert grown == 12  # 10 × 1.2: latency at its baseline, and requests waited
    # Now the same requests take four times as long: the limit comes down.
    caplog.set_level(logging.INFO, logger="apf_limiter")
    for _ in range(3):
        await _wave(limiter, clock, 30, 0.4)
    assert _server_limit(limiter) < grown
    statistics = limiter.adaptive_concurrency
    assert statistics is not None
    assert statistics.applied_limit == _server_limit(limiter)
    assert statistics.baselines == {"test": pytest.approx(0.1)}
    assert statistics.last_ratio > 1.2 and statistics.last_latency == pytest.approx(0.4)
    assert statistics.algorithm == "Gradient" and statistics.updates >= 2
    assert limiter.config.server_concurrency_limit == 10  # the configuration is untouched
    assert any("adaptive concurrency: server limit" in r.message for r in caplog.records)
    # The level follows the total, exactly as ServerCL would.
    level = limiter.statistics().priority_levels["test"]
    assert level.nominal_limit == _server_limit(limiter)


async def test_queued_requests_survive_a_shrink_and_wait_for_the_new_limit() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(initialLimit=10), clock=clock)
    await _wave(limiter, clock, 10, 0.1)  # the baseline: 0.1 s
    await clock.advance_to(1.5)
    limiter.run_due()  # the first update: healthy, nothing waited, so no growth
    assert _server_limit(limiter) == 10
    admissions = [limiter.admit(DIGEST) for _ in range(30)]
    started = [admission.start() for admission in admissions]
    assert started.count(True) == 10
    waits = {
        admission: asyncio.create_task(admission.wait())
        for admission, began in zip(admissions, started, strict=True)
        if not began
    }
    await clock.advance(0.5)
    # The ten running took five times the baseline; ten waiting ones take their seats.
    for admission in admissions[:10]:
        admission.release()
    await clock.advance(0)
    level = limiter.statistics().priority_levels["test"]
    assert level.executing_requests == 10 and level.waiting_requests == 10
    await clock.advance_to(2.5)
    limiter.run_due()  # the update: the ratio is 5, so the limit halves
    assert _server_limit(limiter) == 5
    level = limiter.statistics().priority_levels["test"]
    assert level.current_limit == 5
    assert level.executing_requests == 10 and level.waiting_requests == 10  # nobody lost
    running = [a for a in admissions[10:] if a.phase.name == "ADMITTED"]
    for admission in running[:5]:
        admission.release()
    await clock.advance(0)
    level = limiter.statistics().priority_levels["test"]
    assert level.executing_requests == 5 and level.waiting_requests == 10  # still full
    running[5].release()
    await clock.advance(0)
    level = limiter.statistics().priority_levels["test"]
    assert level.executing_requests == 5 and level.waiting_requests == 9  # one in, one out
    for admission in admissions:
        admission.release()
    await asyncio.gather(*waits.values(), return_exceptions=True)


async def test_unrun_and_exempt_requests_are_not_sampled() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    exempt = RequestDigest(user="admin", groups=("system:masters",), path="/p")
    for digest in (exempt, DIGEST):
        admission = limiter.admit(digest)
        assert admission.start()
        await clock.advance(0.5)
        admission.release(ran=digest is not DIGEST)  # exempt ran; ours never did
    adapter = limiter._core.adapter
    assert adapter is not None and adapter.learned._levels == {}
    admission = limiter.admit(DIGEST)
    assert admission.start()
    await clock.advance(0.25)
    admission.release()
    assert adapter.learned._levels["test"].latencies == [0.25]
    assert adapter.learned.last_latency == 0.25


async def test_reloading_keeps_what_was_learned_and_removing_it_restores_the_static_limit() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(initialLimit=6), clock=clock)
    assert _server_limit(limiter) == 6
    limiter.reconfigure(_config(maxLimit=5))
    assert _server_limit(limiter) == 5  # carried over, clamped into the new bounds
    assert limiter.adaptive_concurrency is not None
    limiter.reconfigure(single_level_config(limit=10))
    assert limiter.adaptive_concurrency is None
    assert _server_limit(limiter) == 10
    await _wave(limiter, clock, 20, 1.0)
    await clock.advance(2)
    limiter.run_due()
    assert _server_limit(limiter) == 10


def test_a_failing_update_is_logged_and_keeps_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    from apf_limiter.limiter import _adapting

    if not _adapting.__file__.endswith(".py"):
        pytest.skip("a compiled Adapter checks its arguments' types before the guard")
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    adapter = limiter._core.adapter
    assert adapter is not None

    class Broken:
        def statistics(self) -> None:
            raise RuntimeError("boom")

    settled: list[object] = []
    broken: Any = Broken()
    adapter.run_due(1.0, broken, limiter.config, settled.append)
    assert settled == [] and adapter.learned.applied == 10
    assert "the update failed; the server limit stays 10" in caplog.text


async def test_a_restart_under_full_load_probes_below_and_finds_the_knee(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 20 closed-loop clients at once, a backend whose knee is 4 (0.1 s up to 4 in flight,
    # proportionally longer beyond, set by what runs as it starts), ServerCL from 40: the
    # first baseline is learned at 20 in flight and reads healthy there. A probe queues
    # requests for a moment (none is rejected) and the limit comes down to the knee.
    caplog.set_level(logging.DEBUG, logger="apf_limiter")
    clock = FakeClock()
    limiter = Limiter(_config(limit=40, minLimit=1, smoothing=0.3), clock=clock)
    in_flight = 0
    rejected = 0

    async def client() -> None:
        nonlocal in_flight, rejected
        while True:
            try:
                async with limiter.admit(DIGEST):
                    in_flight += 1
                    try:
                        await asyncio.sleep(0)  # those starting together see each other
                        await clock.sleep(0.1 * max(1.0, in_flight / 4))
                    finally:
                        in_flight -= 1
            except Exception:
                rejected += 1
                await clock.sleep(1.0)

    tasks = [asyncio.create_task(client()) for _ in range(20)]
    try:
        await clock.advance(60.0)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    statistics = limiter.adaptive_concurrency
    assert statistics is not None
    assert 3 <= _server_limit(limiter) <= 6
    assert statistics.baselines["test"] == pytest.approx(0.1, rel=0.1)
    assert statistics.probes >= 1 and not statistics.probing
    assert rejected == 0
    probing = [r for r in caplog.records if "probing at a server limit" in r.message]
    assert probing and all(r.levelno == logging.DEBUG for r in probing)
