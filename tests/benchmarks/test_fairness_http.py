"""The HTTP fairness benchmark reads the server's times right and computes its figures right."""

from __future__ import annotations

import asyncio
import math

import pytest

from benchmarks.fairness_bench import server_side
from benchmarks.fairness_http import HttpLoad, HttpRecord, run_http_load
from benchmarks.servers import running_server


def _served(flow: str, sent: float, wait: float, start: float, end: float) -> HttpRecord:
    return HttpRecord(flow, sent, end - sent + 0.001, 200, wait, start, end)


def test_server_side_figures_from_handler_times() -> None:
    records = [
        # One seat. flow-0 runs [0, 2); flow-1 arrives at 0.5, waits until 2, runs [2, 3).
        _served("flow-0", 0.0, 0.0, 0.0, 2.0),
        _served("flow-1", 0.5, 1.5, 2.0, 3.0),
        # Then the seat is idle [3, 3.5) with nobody waiting, and flow-1 runs [3.5, 4).
        _served("flow-1", 3.5, 0.0, 3.5, 4.0),
    ]
    figures = server_side(records, capacity=1, begin=0.0, end=4.0)
    assert figures["backlogged"] == pytest.approx(1.5 / 4.0)  # [0.5, 2) had a waiter
    assert figures["utilization"] == pytest.approx(1.0)
    # Seat-seconds: flow-0 2.0, flow-1 1.5 -> (3.5)^2 / (2 * (4 + 2.25)).
    assert figures["jain"] == pytest.approx(3.5**2 / (2 * 6.25))
    # The window clips the service: inside [1, 4) flow-0 got 1.0 and flow-1 1.5.
    clipped = server_side(records, capacity=1, begin=1.0, end=4.0)
    assert clipped["jain"] == pytest.approx(2.5**2 / (2 * 3.25))


def test_server_side_refuses_times_from_another_clock() -> None:
    skewed = [_served("flow-0", 10.0, 0.0, 0.0, 2.0)]  # started before it was sent
    assert all(math.isnan(v) for v in server_side(skewed, 1, 0.0, 4.0).values())
    missing = [HttpRecord("flow-0", 0.0, 1.0, 200, 0.0)]  # no x-start / x-end
    assert all(math.isnan(v) for v in server_side(missing, 1, 0.0, 4.0).values())


def test_backlogged_flows_over_real_http() -> None:
    load = HttpLoad(
        duration=1.5, elephant_concurrency=0, backlogged=(3, 3), mice=0, service_time=0.02
    )
    with running_server("apf", "work_apf", env={"APF_BENCH_CAPACITY": "2"}) as server:
        records = asyncio.run(run_http_load(server.host, server.port, load))
    assert {r.flow for r in records} == {"flow-0", "flow-1"}
    assert all(r.status == 200 for r in records)
    assert len(records) > 40  # 2 seats, ~20 ms each, 1.5 s
    figures = server_side(records, capacity=2, begin=0.2, end=1.5)
    assert figures["backlogged"] > 0.5  # 6 in flight for 2 seats: someone always waits
    assert 0.8 < figures["utilization"] <= 1.0
    assert 0.9 < figures["jain"] <= 1.0
