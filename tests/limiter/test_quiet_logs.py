"""A plain app's logs stay quiet (issue 28, item 4): borrowing's every move is DEBUG.

With the built-in configuration, requests now and then (and an exempt probe) move seats between
levels by one or two every few periods ("borrowing moved seats: exempt 0->1", then "1->0");
nothing there is for an operator to act on, so nothing reaches INFO.
"""

from __future__ import annotations

import logging

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter.testing import FakeClock

_PERIODS = 60


async def _plain_traffic(limiter: Limiter, clock: FakeClock) -> None:
    """A few requests a period, the odd one slow, for many borrowing periods."""
    period = limiter.config.borrowing_period
    for tick in range(_PERIODS):
        users = ("alice", "bob") if tick % 3 else ("alice",)
        admissions = [limiter.admit(RequestDigest(user=user, path="/items")) for user in users]
        for admission in admissions:
            await admission.__aenter__()
        if tick % 4 == 0:  # the exempt probe of a plain deployment
            async with limiter.admit(RequestDigest(path="/healthz", user="system:probe")):
                await clock.advance(period / 2)
        else:
            await clock.advance(period / 2)
        for admission in admissions:
            await admission.__aexit__(None, None, None)
        await clock.advance(period / 2)
    limiter.run_due()


async def test_a_plain_app_logs_nothing_at_info_over_many_periods(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    limiter = Limiter(clock=clock)  # the built-in configuration
    caplog.set_level(logging.DEBUG, logger="apf_limiter")
    caplog.clear()
    await _plain_traffic(limiter, clock)
    moves = [r for r in caplog.records if r.getMessage().startswith("borrowing moved seats")]
    assert moves, "the traffic moves seats: the test would prove nothing otherwise"
    assert all(record.levelno == logging.DEBUG for record in moves)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
