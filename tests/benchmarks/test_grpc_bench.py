"""benchmarks/grpc_bench.py measures both servers, interleaved, in one short run."""

from __future__ import annotations

import pytest

from benchmarks.grpc_bench import measure


@pytest.mark.timeout(60)
async def test_grpc_bench_reports_both_servers() -> None:
    figures = await measure(rounds=2, calls=20)
    assert figures["bare_us"] > 0 and figures["apf_us"] > 0
    assert figures["added_us"] == pytest.approx(figures["apf_us"] - figures["bare_us"])
