"""The demo's table says what its latency columns time and how the elephant treats a 429."""

from __future__ import annotations

from apf_limiter._demo.generator import _ELEPHANT_RETRY_PAUSE
from apf_limiter._demo.load import ClientResult
from apf_limiter._demo.report import render_table


def test_the_table_says_its_latencies_exclude_429s_and_the_elephant_ignores_retry_after() -> None:
    elephant = ClientResult("elephant", "elephant", [0.5, 0.6], rejected=40, retry_after=40)
    mouse = ClientResult("mouse-1", "mouse", [0.1, 0.2])
    table = render_table({"apf": {"elephant": elephant, "mouse-1": mouse}})
    lines = table.splitlines()
    assert lines[-2] == (
        "p50/p99: latency of the served (200) responses only; the 429s are counted, not timed."
    )
    assert lines[-1] == (
        "The elephant ignores Retry-After: it retries each 429 after 0.2 s, whatever it says."
    )
    assert _ELEPHANT_RETRY_PAUSE == 0.2  # what the note says
    rows = {line.split("|")[0].strip(): line.split("|")[1].split() for line in lines if "|" in line}
    assert rows["elephant"] == ["2", "40", "500", "ms", "600", "ms"]
