from __future__ import annotations

import pytest

from apf_limiter.engine._seat_seconds import (
    HIGH_R,
    MASK,
    R_DECREMENT,
    duration_per_seat,
    go_round,
    seat_seconds_float,
    seat_seconds_str,
    seats_times_duration,
    to_nanoseconds,
)

SECOND = 1_000_000_000
MS = 1_000_000


@pytest.mark.parametrize(
    ("units", "text"),
    [(1, "0.00000001ss"), (10**8 - 1, "0.99999999ss"), (0, "0.00000000ss")],
)
def test_string_form(units: int, text: str) -> None:
    assert seat_seconds_str(units) == text


@pytest.mark.parametrize(
    ("seats", "duration", "text", "value"),
    [
        (1, SECOND, "1.00000000ss", 1.0),
        (123, 100 * MS, "12.30000000ss", 12.3),
        (1203, 10 * MS, "12.03000000ss", 12.03),
    ],
)
def test_seats_times_duration(seats: int, duration: int, text: str, value: float) -> None:
    units = seats_times_duration(seats, duration)
    assert seat_seconds_str(units) == text
    assert seat_seconds_float(units) == pytest.approx(value)


@pytest.mark.parametrize(
    ("seats", "duration", "divisor", "expected"),
    [
        (10, SECOND, 1, 10 * SECOND),
        (1, SECOND, 10, 100 * MS),
        (13, 5 * MS, 5, 13 * MS),
        (12, 0, 10, 0),
    ],
)
def test_duration_per_seat(seats: int, duration: int, divisor: int, expected: int) -> None:
    assert duration_per_seat(seats_times_duration(seats, duration), divisor) == expected


def test_constants() -> None:
    assert R_DECREMENT == 9223372036854775807
    assert HIGH_R == 13835058055282163710


def test_negative_durations_wrap_modulo_2_64() -> None:
    assert seats_times_duration(1, -10) == MASK  # -1 unit
    assert (5 - seats_times_duration(1, -30)) & MASK == 8


@pytest.mark.parametrize(
    ("x", "rounded"),
    [
        (24.5, 25),
        (220.5, 221),
        (-2.5, -3),
        (2.4999999999999996, 2),
        (0.49999999999999994, 0),
        (1.5, 2),
        (-0.5, -1),
        (3.0, 3),
    ],
)
def test_go_round_is_half_away_from_zero(x: float, rounded: int) -> None:
    assert go_round(x) == rounded


@pytest.mark.parametrize(
    ("seconds", "ns"),
    [
        (0.0, 0),
        (1e-9, 1),
        (0.0015, 1_500_000),
        (12345.678901234, 12_345_678_901_234),
        (2.5e-9, 3),  # halves away from zero (Python's round() would give 2)
        (-2.5e-9, -3),
        (-0.0015, -1_500_000),
    ],
)
def test_to_nanoseconds_is_the_nearest_with_halves_away_from_zero(seconds: float, ns: int) -> None:
    assert to_nanoseconds(seconds) == ns


def test_duration_per_seat_converts_the_work_to_float_first_as_go_does() -> None:
    # Go: time.Duration(float64(ss) / seats * 10). Above 2**53 units float64(ss) rounds, and
    # an exact integer division would come out tens of nanoseconds off.
    assert duration_per_seat(636460777959018642, 31) == 205309928373876960
