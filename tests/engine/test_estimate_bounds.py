"""Work estimates at the digest boundary (issue 28, item 9): seats beyond a 32-bit integer and an
additional latency beyond an hour are refused with a clear error, and a final work too large for
the engine's 64-bit seat-seconds no longer wraps when its seats are narrowed to maxSeats."""

from __future__ import annotations

import pytest

from apf_limiter import Limiter, RequestDigest
from apf_limiter._digest import MAX_ADDITIONAL_LATENCY, MAX_ESTIMATE_SEATS
from apf_limiter.engine._level import MAX_NARROWED_LATENCY, narrowed_latency
from apf_limiter.testing import FakeClock
from tests.helpers import single_level_config


@pytest.mark.parametrize(
    ("estimate", "message"),
    [
        ({"seats": 2**31}, "seats must be at most 2147483647"),
        ({"final_seats": 2**40, "additional_latency": 1.0}, "final_seats must be at most"),
        ({"additional_latency": 1e300}, "additional_latency must be at most 3600 seconds"),
        ({"additional_latency": 3600.5}, "additional_latency must be at most 3600 seconds"),
    ],
)
def test_an_estimate_past_the_bounds_is_refused_with_its_value(
    estimate: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RequestDigest(user="u", **estimate)  # type: ignore[arg-type]


def test_the_bounds_themselves_are_accepted() -> None:
    digest = RequestDigest(
        seats=MAX_ESTIMATE_SEATS,
        final_seats=MAX_ESTIMATE_SEATS,
        additional_latency=MAX_ADDITIONAL_LATENCY,
    )
    assert digest.final_seats == MAX_ESTIMATE_SEATS


def test_narrowing_a_huge_final_work_does_not_wrap() -> None:
    # 2**31 seats for an hour: 7.7e20 seat-second units, past 64 bits. Wrapped, the narrowed
    # latency came out at a few seconds: the seats went back long before the work was done.
    narrowed = narrowed_latency(MAX_ESTIMATE_SEATS, MAX_ADDITIONAL_LATENCY, 10)
    assert narrowed == MAX_NARROWED_LATENCY
    # Below the bound it is Kubernetes' arithmetic: the same work, on fewer seats.
    assert narrowed_latency(40, 3.0, 10) == pytest.approx(12.0)


async def test_the_widest_estimate_holds_its_seats_and_gives_them_back() -> None:
    clock = FakeClock()
    limiter = Limiter(single_level_config(limit=10), clock=clock)
    digest = RequestDigest(
        user="u", seats=1, final_seats=MAX_ESTIMATE_SEATS, additional_latency=MAX_ADDITIONAL_LATENCY
    )
    async with limiter.admit(digest):
        pass
    level = limiter.statistics().priority_levels["test"]
    assert level.executing_seats > 0  # held for the narrowed latency: not wrapped to nothing
    await clock.advance(MAX_NARROWED_LATENCY + 1)
    assert limiter.statistics().priority_levels["test"].executing_seats == 0
