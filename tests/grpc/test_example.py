"""examples/grpc_server.py runs: a real server, six calls of one user through two seats."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpc_server.py"


@pytest.mark.timeout(60)
async def test_the_grpc_example_serves_and_queues() -> None:
    spec = importlib.util.spec_from_file_location("grpc_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = await module.main()
    assert [reply for reply, _ in results] == [b"done %d" % n for n in range(6)]
    assert {trailers["x-apf-priority-level"] for _, trailers in results} == {"jobs"}
    waits = [float(trailers["x-apf-queue-wait"]) for _, trailers in results]
    assert sum(wait > 0 for wait in waits) >= 3  # two seats: most of the six queued
