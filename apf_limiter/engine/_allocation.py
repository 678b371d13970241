"""The fair allocation solver that divides seats between priority levels.

Given a required sum and, per item, a target with lower and upper bounds, find the *fair
proportion* ``p`` such that the allocations ``clamp(p * target, lower, upper)`` add up to the
required sum. Every item then gets ``p`` times its target unless a bound stops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MIN_TARGET: Final = 0.001
"""Targets below this are raised to it, so that no target is zero."""
EPSILON: Final = 1e-7
_FLOAT32_MAX: Final = 3.4028234663852886e38


class AllocationError(ValueError):
    """The allocation problem has no solution (or is malformed)."""


@dataclass(frozen=True, slots=True)
class AllocationItem:
    """One item (priority level) of an allocation problem.

    Attributes:
        target: What the item would get with nothing to constrain it.
        lower_bound: The least the item may get.
        upper_bound: The most the item may get.
    """

    target: float
    lower_bound: float
    upper_bound: float


def compute_concurrency_allocation(
    required_sum: int, items: Sequence[AllocationItem]
) -> tuple[list[float], float]:
    """Solve a fair allocation problem exactly as Kubernetes does.

    Args:
        required_sum: What the allocations must add up to.
        items: The items, each with a target and bounds.

    Returns:
        The allocations (in item order) and the fair proportion.

    Raises:
        AllocationError: On a negative sum, an inconsistent item, or bounds that cannot meet
            the required sum.
    """
    if required_sum < 0:
        raise AllocationError("negative sums are not supported")
    required = float(required_sum)
    low_sum = high_sum = target_sum = 0.0
    min_rlb = min_rub = _FLOAT32_MAX
    max_rlb = max_rub = 0.0
    targets: list[float] = []
    relative: list[tuple[float, float]] = []
    for index, item in enumerate(items):
        target = item.target
        if item.lower_bound < 0:
            raise AllocationError(
                f"lower bound {index} is {item.lower_bound} but negative lower bounds are not "
                "allowed"
            )
        if target < item.lower_bound:
            raise AllocationError(
                f"target {index} is {target}, which is below its lower bound of {item.lower_bound}"
            )
        if item.upper_bound < item.lower_bound:
            raise AllocationError(
                f"upper bound {index} is {item.upper_bound} but should not be less than the "
                f"lower bound {item.lower_bound}"
            )
        if target < MIN_TARGET:
            # Avoids dividing by zero below.
            target = MIN_TARGET
        low_sum += item.lower_bound
        high_sum += item.upper_bound
        target_sum += target
        rlb = item.lower_bound / target
        rub = item.upper_bound / target
        min_rlb, max_rlb = min(min_rlb, rlb), max(max_rlb, rlb)
        min_rub, max_rub = min(min_rub, rub), max(max_rub, rub)
        targets.append(target)
        relative.append((rlb, rub))
    if max_rlb > 1:
        raise AllocationError(
            f"lbRange.max-1={max_rlb - 1}, which is impossible because lbRange.max can not be "
            "greater than 1"
        )
    if low_sum - required > EPSILON:
        raise AllocationError(
            f"lower bounds sum to {low_sum}, which is higher than the required sum of "
            f"{required_sum}"
        )
    if required - high_sum > EPSILON:
        raise AllocationError(
            f"upper bounds sum to {high_sum}, which is lower than the required sum of "
            f"{required_sum}"
        )
    if required_sum == 0:
        return [0.0] * len(items), 0.0
    if low_sum - required > -EPSILON:
        # No wiggle room: constrained from below.
        return [item.lower_bound for item in items], min_rlb
    if required - high_sum > -EPSILON:
        # No wiggle room: constrained from above.
        return [item.upper_bound for item in items], max_rub
    fair_prop = required / target_sum
    if max_rlb <= fair_prop <= min_rub:
        return [target * fair_prop for target in targets], fair_prop
    fair_prop = _sweep(required, low_sum, min_rlb, targets, relative)
    return [
        float(max(item.lower_bound, min(item.upper_bound, fair_prop * target)))
        for item, target in zip(items, targets, strict=True)
    ], fair_prop


def _sweep(
    required: float,
    low_sum: float,
    min_rlb: float,
    targets: list[float],
    relative: list[tuple[float, float]],
) -> float:
    """Raise the fair proportion through the sorted relative bounds until the sum is met."""
    # (bound, is_lower, item): crossing a lower bound makes the item sensitive to the fair
    # proportion; crossing its upper bound makes it insensitive again. Ties are kept in Go's
    # order: Kubernetes builds [lower 0, upper 0, lower 1, upper 1, ...] and sort.Sort orders
    # up to 12 bounds by a stable insertion sort; the order of tied bounds changes the float
    # sums, and so, at exact .5 boundaries, a rounded limit. (Beyond 6 items Go's pdqsort may
    # order ties differently; the results then agree within the solver's tolerance.)
    interleaved = [
        bound
        for i, (rlb, rub) in enumerate(relative)
        for bound in ((rlb, True, i), (rub, False, i))
    ]
    bounds = sorted(interleaved, key=lambda bound: bound[0])
    sum_so_far = low_sum
    fair_prop = min_rlb
    sensitive_target_sum = 0.0
    sensitive_count = 0
    pending_target = 0.0
    pending_count = 0
    next_index = 0
    while sum_so_far < required:
        while True:
            sensitive_target_sum += pending_target
            sensitive_count += pending_count
            if next_index >= len(bounds):
                raise AllocationError(
                    "impossible: ran out of bounds to consider in bound-constrained problem"
                )
            next_bound, is_lower, item = bounds[next_index]
            pending_target = targets[item] if is_lower else -targets[item]
            pending_count = 1 if is_lower else -1
            next_index += 1
            if next_bound > fair_prop:
                break
        if sensitive_count == 0:
            fair_prop = next_bound
            continue
        next_prop = fair_prop + (required - sum_so_far) / sensitive_target_sum
        if next_prop <= next_bound:
            return next_prop
        sum_so_far += (next_bound - fair_prop) * sensitive_target_sum
        fair_prop = next_bound
    return fair_prop
