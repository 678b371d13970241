"""The dropped-requests tracker (dropped_requests_tracker.go), with sequences worked out by hand.

Notation in comments: "eval@t" is the re-evaluation done by the first drop of second t;
"window" is the history entries u with t - u <= retry_after and u < t; "keep" is the trim
limit min(2 * retry_after, 32), applied against the second being closed.
"""

from __future__ import annotations

from apf_limiter.engine._retry_after import (
    MAX_RETRY_AFTER,
    DroppedRequestsSnapshot,
    DroppedRequestsTracker,
)

PL = "workload-low"


def drop(tracker: DroppedRequestsTracker, unix: int, count: int = 1, level: str = PL) -> int:
    for _ in range(count):
        tracker.record_dropped(level, unix)
    return tracker.retry_after(level)


def snapshot(tracker: DroppedRequestsTracker, level: str = PL) -> DroppedRequestsSnapshot:
    snap = tracker.snapshot(level)
    assert snap is not None
    return snap


def test_unknown_level_is_one_second() -> None:
    tracker = DroppedRequestsTracker()
    assert tracker.retry_after("nobody") == 1
    assert tracker.snapshot("nobody") is None
    assert MAX_RETRY_AFTER == 32


def test_first_drop_pushes_zero_second_and_stays_at_one() -> None:
    tracker = DroppedRequestsTracker()
    # eval@100: the initial current second (0, 0) is pushed; 100 - 0 > 1, so the window is
    # empty: 0 drops, not >= 3 and retry_after is already 1 -> 1.
    assert drop(tracker, 100) == 1
    assert snapshot(tracker) == DroppedRequestsSnapshot(
        history=((0, 0),),
        current_unix=100,
        current_count=1,
        retry_after=1,
        retry_after_update_unix=0,
    )
    # eval@101: (100, 1) is pushed; trim against 100 with keep 2 removes (0, 0) (100 > 2).
    # Window {100: 1} -> 1 drop: not >= 3, not < 1 -> 1.
    assert drop(tracker, 101) == 1
    assert snapshot(tracker).history == ((100, 1),)


def test_drops_in_second_zero_are_real_drops() -> None:
    tracker = DroppedRequestsTracker()
    # The current second starts as 0, so drops at 0 just count (no push, no evaluation).
    assert drop(tracker, 0, 3) == 1
    assert snapshot(tracker).history == ()
    assert snapshot(tracker).current_count == 3
    # eval@1: (0, 3) pushed; window {0: 3} (1 - 0 <= 1): 3 >= 3*1 and 1 - 0 >= 1 -> 2.
    assert drop(tracker, 1) == 2
    assert snapshot(tracker).retry_after_update_unix == 1


def test_three_drops_a_second_doubles_up_to_32_at_most_once_per_value() -> None:
    tracker = DroppedRequestsTracker()
    # With 3 drops in every second, the window of eval@t holds 3 * retry_after drops as soon
    # as retry_after full seconds precede t, so the value doubles exactly when
    # t - last_update >= retry_after:
    #   @100: window empty (only (0, 0), too old) -> 1
    #   @101: {100: 3} = 3 >= 3, 101 - 0 >= 1 -> 2 (update 101)
    #   @102: {101, 100} = 6 >= 6 but 102 - 101 = 1 < 2 -> 2; 6 < 2 is false, no decrement
    #   @103: {102, 101} = 6, 103 - 101 = 2 >= 2 -> 4 (update 103)
    #   @104..106: 12 drops, but fewer than 4 s since 103 -> 4
    #   @107: {106..103} = 12 >= 12, 107 - 103 = 4 -> 8 (update 107)
    #   @108..114 -> 8; @115: {114..107} = 24 >= 24, 115 - 107 = 8 -> 16 (update 115)
    #   @116..130 -> 16; @131: {130..115} = 48 >= 48, 131 - 115 = 16 -> 32 (update 131)
    #   @132..: capped at 32; the (no-op) doubling still happens at 163 and 195, each
    #   time with {t-1 .. t-32} = 96 >= 96.
    expected = {100: 1, 101: 2, 103: 4, 107: 8, 115: 16, 131: 32}
    updates = {101: 101, 103: 103, 107: 107, 115: 115, 131: 131, 163: 163, 195: 195}
    value, update = 1, 0
    for t in range(100, 201):
        value = expected.get(t, value)
        update = updates.get(t, update)
        assert drop(tracker, t, 3) == value, t
        assert snapshot(tracker).retry_after_update_unix == update, t
    assert tracker.retry_after(PL) == 32


def test_history_trimmed_to_what_evaluations_can_need() -> None:
    tracker = DroppedRequestsTracker()
    # One drop a second keeps retry_after at 1 (window 1 drop: not >= 3, not < 1); keep is
    # min(2, 32) = 2, so closing second c keeps entries u with c - u <= 2: three seconds.
    for t in range(100, 111):
        assert drop(tracker, t) == 1
    assert snapshot(tracker).history == ((107, 1), (108, 1), (109, 1))
    assert snapshot(tracker).current_unix == 110

    big = DroppedRequestsTracker()
    for t in range(100, 201):
        drop(big, t, 3)
    # At 32 (from 131 on, see the doubling test) keep is min(64, 32) = 32: closing 199
    # keeps 167..199, 33 entries.
    history = snapshot(big).history
    assert history[0] == (167, 3)
    assert history[-1] == (199, 3)
    assert len(history) == 33


def test_quiet_periods_decrement_by_one_per_evaluation() -> None:
    tracker = DroppedRequestsTracker()
    for t in range(100, 132):
        drop(tracker, t, 3)
    assert tracker.retry_after(PL) == 32
    # No decay without drops: only drops trigger evaluations.
    assert tracker.retry_after(PL) == 32
    # Each lone drop 100 s after the previous one sees an empty window (the previous drop is
    # more than retry_after <= 32 s old): 0 < retry_after -> minus one, down to 1 and no less.
    for k in range(1, 41):
        assert drop(tracker, 1000 + 100 * k) == max(32 - k, 1), k


def test_one_drop_a_second_holds_two_then_a_gap_brings_one() -> None:
    tracker = DroppedRequestsTracker()
    for t in range(100, 104):
        drop(tracker, t, 3)
    # 100..103 at 3/s gives 4 (see the doubling test).
    assert tracker.retry_after(PL) == 4
    # eval@200: window empty (200 - 103 > 4) -> 0 < 4 -> 3.
    assert drop(tracker, 200) == 3
    # eval@201: keep min(6, 32) = 6 against 200 trims 100..103; window {200: 1} = 1 < 3 -> 2.
    assert drop(tracker, 201) == 2
    # eval@202: window {201: 1, 200: 1} = 2: not < 2, not >= 6 -> 2.
    assert drop(tracker, 202) == 2
    # eval@203: window {202, 201} = 2 (203 - 200 > 2) -> 2.
    assert drop(tracker, 203) == 2
    # eval@210: window empty (210 - 203 > 2) -> 0 < 2 -> 1.
    assert drop(tracker, 210) == 1
    # eval@300: window empty, but 1 is the floor -> 1.
    assert drop(tracker, 300) == 1


def test_drops_of_the_current_second_count_from_the_next_evaluation() -> None:
    tracker = DroppedRequestsTracker()
    # 100 drops in second 100: only the first evaluates (empty window) -> 1 throughout.
    for _ in range(100):
        assert drop(tracker, 100) == 1
    # eval@101: window {100: 100} >= 3 -> 2, a single doubling however many drops.
    assert drop(tracker, 101) == 2
    # More drops in 101 do not re-evaluate.
    assert drop(tracker, 101, 50) == 2
    # eval@102: window {101: 51, 100: 100} = 151 >= 6, but 102 - 101 = 1 < 2 -> 2.
    assert drop(tracker, 102) == 2
    # eval@103: window {102: 1, 101: 51} = 52 >= 6 and 103 - 101 = 2 >= 2 -> 4.
    assert drop(tracker, 103) == 4
    # eval@104: window {103..100} = 1 + 1 + 51 + 100 = 153 >= 12, but 104 - 103 < 4 -> 4.
    assert drop(tracker, 104) == 4
    # eval@107: nothing was dropped in 105 and 106, so the window is {104: 1, 103: 1} = 2
    # (107 - 102 > 4): not >= 12, and 2 < 4 -> 3.
    assert drop(tracker, 107) == 3


def test_levels_are_independent() -> None:
    tracker = DroppedRequestsTracker()
    drop(tracker, 100, 3, level="a")
    # eval@101 of "a": {100: 3} -> 2.
    assert drop(tracker, 101, level="a") == 2
    # "b" has its own state: its first drop at 101 sees an empty window -> 1.
    assert drop(tracker, 101, level="b") == 1
    assert tracker.retry_after("a") == 2
    assert snapshot(tracker, "b").history == ((0, 0),)
    assert tracker.retry_after("never-seen") == 1
    assert tracker.snapshot("never-seen") is None
    assert "a=2s" in repr(tracker)


def test_a_burst_after_quiet_decrements_once() -> None:
    tracker = DroppedRequestsTracker()
    for t in range(100, 132):
        drop(tracker, t, 3)
    # eval@1000 only (the other 4 drops of 1000 do not evaluate): empty window -> 32 - 1.
    assert drop(tracker, 1000, 5) == 31
    # eval@1001: window {1000: 5} = 5 < 31 -> 30; again once only.
    assert drop(tracker, 1001, 5) == 30


def test_seconds_not_before_the_evaluated_one_are_not_counted() -> None:
    tracker = DroppedRequestsTracker()
    # eval@100 -> 1; then 4 more drops in 100.
    assert drop(tracker, 100, 5) == 1
    # The clock steps back. eval@99: (100, 5) is in the history but not before 99 -> 0
    # drops; already at 1 -> 1.
    assert drop(tracker, 99) == 1
    # eval@100: history (100, 5), (99, 1); only 99 < 100 counts: 1 drop < 3 -> 1.
    assert drop(tracker, 100) == 1
    assert snapshot(tracker).history == ((100, 5), (99, 1))
