"""The Go text/tabwriter equivalent and Go's duration and time formats.

Every expected string below was printed by Go itself (``text/tabwriter.NewWriter(w, 8, 0, 1,
' ', 0)``, ``time.Duration.String`` and ``Time.UTC().Format(time.RFC3339Nano)``).
"""

from __future__ import annotations

import pytest

from apf_limiter.observability._goformat import go_duration, rfc3339_nano
from apf_limiter.observability._tabwriter import tabwrite

GO_TABWRITER = [
    (
        "PriorityLevelName,\tActiveQueues,\tIsIdle\nexempt,\t0,\ttrue\nworkload-high,\t12,\tfalse\n",
        "PriorityLevelName, ActiveQueues, IsIdle\n"
        "exempt,            0,            true\n"
        "workload-high,     12,           false\n",
    ),
    # A line without tabs ends the column blocks above it.
    ("a\tb\tc\n\nxx\ty\n", "a       b       c\n\nxx      y\n"),
    ("a\tb\tc\nabcdefghijkl\n1\t2\t3\n", "a       b       c\nabcdefghijkl\n1       2       3\n"),
    # A shorter line splits the blocks of the columns to its right.
    ("aaa\tb\n\tcccccccccc\tdd\n", "aaa     b\n        cccccccccc dd\n"),
    ("a\t\tb\n\t\tc\n", "a               b\n                c\n"),
    # Text after the last newline is laid out but not terminated; a trailing tab is dropped.
    ("x\ty\t", "x       y"),
    # Widths count characters, not bytes.
    ("µé\tb\nc\td\n", "µé      b\nc       d\n"),
    ("", ""),
    # A vertical tab ends a cell like a tab; a form feed ends the line and flushes. (Cells can
    # hold them: a percent-decoded path, a user name from an identify hook.)
    ("a,\tb\vc,\td\n", "a,      b       c,      d\n"),
    ("a,\tb\fc,\td\nxx,\tyyyyyyyyyy,\tz\n", "a,      b\nc,      d\nxx,     yyyyyyyyyy, z\n"),
    ("x\fy\tz\n\fq\tr\v\n", "x\ny       z\n\nq       r       \n"),
]


@pytest.mark.parametrize(("text", "expected"), GO_TABWRITER)
def test_tabwrite_matches_go_text_tabwriter(text: str, expected: str) -> None:
    assert tabwrite(text) == expected


def test_tabwrite_other_settings() -> None:
    assert tabwrite("a\tb\n", minwidth=0, padding=2, padchar=".") == "a..b\n"
    # Tab padding with tab width 0 cannot pad at all (as in Go).
    assert tabwrite("a\tb\n", padchar="\t") == "ab\n"
    assert tabwrite("abcdefghij\tb\nc\td\n", minwidth=0, tabwidth=8, padchar="\t") == (
        "abcdefghij\tb\nc\t\td\n"
    )
    with pytest.raises(ValueError, match="one character"):
        tabwrite("a", padchar="  ")


GO_DURATIONS = [
    (0, "0s"),
    (1, "1ns"),
    (999, "999ns"),
    (1000, "1µs"),
    (1500, "1.5µs"),
    (5_000_000, "5ms"),
    (1_234_567, "1.234567ms"),
    (999_999_999, "999.999999ms"),
    (1_000_000_000, "1s"),
    (1_500_000_000, "1.5s"),
    (60_000_000_000, "1m0s"),
    (90_000_000_000, "1m30s"),
    (3_600_000_000_000, "1h0m0s"),
    (3_723_000_000_001, "1h2m3.000000001s"),
    (-5_000_000, "-5ms"),
    (7_200_000_000_000, "2h0m0s"),
]


@pytest.mark.parametrize(("nanoseconds", "expected"), GO_DURATIONS)
def test_go_duration(nanoseconds: int, expected: str) -> None:
    assert go_duration(nanoseconds) == expected


def test_rfc3339_nano() -> None:
    assert rfc3339_nano(0) == "1970-01-01T00:00:00Z"
    assert rfc3339_nano(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert rfc3339_nano(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert rfc3339_nano(1_700_000_000_100_000_000) == "2023-11-14T22:13:20.1Z"
    assert rfc3339_nano(1) == "1970-01-01T00:00:00.000000001Z"
    assert rfc3339_nano(None) == "0001-01-01T00:00:00Z"
