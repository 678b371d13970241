"""The client-deadlines goodput benchmark (benchmarks/client_deadlines.py), its quick run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.client_deadlines import CLIENT_TIMEOUT, SERVICE, VARIANTS, main, run


def test_the_quick_run_shows_what_the_option_does(tmp_path: Path) -> None:
    out = tmp_path / "client_deadlines.json"
    main(["--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["scenario"]["clock"] == "fake"
    assert {row["multiple"] for row in result["rows"]} == {2.0, 5.0}
    rows = {row["variant"]: row for row in result["rows"] if row["multiple"] == 5.0}
    assert set(rows) == set(VARIANTS)
    unseen, on, margin = rows["off, unseen"], rows["on"], rows["on, less the service time"]
    # Off, and the give-ups unseen: requests wait far past their client, most work is wasted.
    assert unseen["max_queue_wait_s"] > 2 * CLIENT_TIMEOUT
    assert unseen["timed_out"] == 0 and unseen["wasted"] > 0.3
    # On: no request is dispatched after its client gave up; its wait ends as a time-out.
    assert on["max_queue_wait_s"] <= CLIENT_TIMEOUT
    assert on["timed_out"] > 0 and on["goodput"] > unseen["goodput"]
    # Given the client's timeout less the service time, no response comes too late.
    assert margin["max_queue_wait_s"] <= CLIENT_TIMEOUT - SERVICE + 1e-9
    assert margin["late"] == 0 and margin["goodput"] >= 0.95
    for row in result["rows"]:
        assert row["arrived"] > 0 and 0 <= row["goodput"] <= 1.05


def test_the_warmup_must_fit_the_duration() -> None:
    with pytest.raises(ValueError, match="warmup"):
        run(duration=1.0, warmup=1.0)
