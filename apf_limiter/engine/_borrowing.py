"""Borrowing of seats between priority levels: smoothing and the three regimes.

Every borrowing period each level's seat-demand integrator is read and reset. The demand is
smoothed (it rises at once and decays with a half-life of about five minutes), then the server's
nominal seats are shared out: exempt levels first take what they used, then the limited levels
get at least their lower limits and, as far as the seats go, their smoothed demand, fairly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from apf_limiter.engine._allocation import (
    AllocationError,
    AllocationItem,
    compute_concurrency_allocation,
)
from apf_limiter.engine._integrator import IntegratorResults
from apf_limiter.engine._seat_seconds import go_round

SMOOTHING_COEFFICIENT: Final = 0.977
_ONE_MINUS_SMOOTHING: Final = 0.023
"""A: the weight of the previous smoothed demand (half-life ≈ 30 periods ≈ 5 minutes)."""


class SeatDemandStats:
    """The smoothed seat-demand statistics of one level (reset to zero for a new level).

    Attributes:
        high_watermark: Rounded maximum demand of the last period.
        average: Average demand of the last period.
        stdev: Standard deviation of the demand in the last period.
        smoothed: The smoothed envelope (average + stdev) used as the borrowing target.
    """

    __slots__ = ("high_watermark", "average", "stdev", "smoothed")

    def __init__(self) -> None:
        self.high_watermark = 0
        self.average = 0.0
        self.stdev = 0.0
        self.smoothed = 0.0

    def update(self, observed: IntegratorResults) -> None:
        """Fold one period's integrator results in."""
        self.high_watermark = go_round(observed.max)
        if observed.duration <= 0:
            return
        stdev = 0.0 if math.isnan(observed.deviation) else observed.deviation
        self.average = observed.average
        self.stdev = stdev
        envelope = observed.average + stdev
        # (1 - A) is Go's compile-time constant, exactly 0.023: 1 - 0.977 in floating point is
        # 0.02300000000000002, which moves the smoothed demand in its last bits.
        self.smoothed = max(
            envelope, SMOOTHING_COEFFICIENT * self.smoothed + _ONE_MINUS_SMOOTHING * envelope
        )


@dataclass(frozen=True, slots=True)
class BorrowingInput:
    """One level's part of a borrowing adjustment.

    Attributes:
        exempt: Whether the level is exempt.
        nominal_limit: NominalCL.
        lower_limit: MinCL (nominal minus lendable).
        upper_limit: MaxCL (nominal plus borrowing limit).
        high_watermark: The level's demand high watermark of the last period.
        smoothed: The level's smoothed demand.
        current_limit: The level's current limit before this adjustment.
    """

    exempt: bool
    nominal_limit: int
    lower_limit: int
    upper_limit: int
    high_watermark: int
    smoothed: float
    current_limit: int


@dataclass(frozen=True, slots=True)
class BorrowingResult:
    """The outcome of one borrowing adjustment.

    Attributes:
        current_limits: The new current limit of each level, in input order.
        targets: The allocation target of each level (for exempt levels, their new limit).
        fair_fraction: The solver's fair proportion (0 in regimes 1 and 2 and on error).
        regime: 1 (only lower limits fit), 2 (partial share of borrowed demand), 3 (solver).
        error: The solver's error message when it failed (limits were kept), else ``""``.
    """

    current_limits: tuple[int, ...]
    targets: tuple[float, ...]
    fair_fraction: float
    regime: int
    error: str = ""


def compute_borrowing(nominal_limit_sum: int, levels: Sequence[BorrowingInput]) -> BorrowingResult:
    """Share ``nominal_limit_sum`` seats between the levels (Kubernetes' updateBorrowing).

    Args:
        nominal_limit_sum: The sum of every level's nominal limit (what is distributed).
        levels: The levels, with their statistics already updated for this period.

    Returns:
        The new current limits and the adjustment's details.
    """
    remaining = nominal_limit_sum
    min_limit_sum = 0
    min_current_sum = 0
    min_currents: list[int] = []
    targets: list[float] = []
    items: list[AllocationItem] = []
    for level in levels:
        if level.exempt:
            min_current = max(level.lower_limit, level.high_watermark)
            remaining -= min_current
            targets.append(float(min_current))
        else:
            min_current = max(level.lower_limit, min(level.nominal_limit, level.high_watermark))
            target = max(float(min_current), level.smoothed)
            targets.append(target)
            items.append(AllocationItem(target, float(min_current), float(level.upper_limit)))
            min_limit_sum += level.lower_limit
            min_current_sum += min_current
        min_currents.append(min_current)
    allocations: list[float] = []
    fair_fraction = 0.0
    share_fraction = 0.0
    error = ""
    if remaining <= min_limit_sum:
        regime = 1
    elif remaining <= min_current_sum:
        regime = 2
        share_fraction = (remaining - min_limit_sum) / (min_current_sum - min_limit_sum)
    else:
        regime = 3
        try:
            allocations, fair_fraction = compute_concurrency_allocation(nominal_limit_sum, items)
        except AllocationError as exc:
            # Backstop: every level keeps its previous limit.
            error = str(exc)
            allocations = [float(level.current_limit) for level in levels if not level.exempt]
    limits: list[int] = []
    item_index = 0
    for level, min_current in zip(levels, min_currents, strict=True):
        if level.exempt:
            limits.append(min_current)
            continue
        if regime == 1:
            limit = level.lower_limit
        elif regime == 2:
            limit = level.lower_limit + go_round((min_current - level.lower_limit) * share_fraction)
        else:
            limit = go_round(allocations[item_index])
        item_index += 1
        limits.append(limit)
    return BorrowingResult(tuple(limits), tuple(targets), fair_fraction, regime, error)
