"""``apf-limiter demo`` with a tiny duration, and its table arithmetic."""

from __future__ import annotations

import pytest

from apf_limiter._cli import main
from apf_limiter._demo.report import percentile

pytestmark = pytest.mark.timeout(60)


def test_demo_runs_both_setups_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--duration", "4", "--elephant", "12", "--mice", "2"])
    out = capsys.readouterr().out
    assert status == 0
    assert "semaphore (today)" in out and "APF (apf_limiter)" in out
    rows = {line.split("|")[0].strip(): line for line in out.splitlines() if "|" in line}
    assert {"elephant", "mouse-1", "mouse-2", "all mice"} <= set(rows)
    served = rows["elephant"].split("|")
    assert int(served[1].split()[0]) > 0 and int(served[2].split()[0]) > 0
    assert "Mice p99 latency:" in out


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--duration", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err


def test_percentile_is_nearest_rank() -> None:
    values = [0.4, 0.1, 0.3, 0.2]
    assert [percentile(values, q) for q in (0.25, 0.5, 0.99, 1.0)] == [0.1, 0.2, 0.4, 0.4]
