from __future__ import annotations

import random

import pytest

from apf_limiter.engine._allocation import (
    AllocationError,
    AllocationItem,
    compute_concurrency_allocation,
)
from apf_limiter.engine._seat_seconds import go_round

I = AllocationItem  # noqa: E741


@pytest.mark.parametrize(
    ("required", "items", "allocs", "fair"),
    [
        (10, [I(1, 0, 10), I(1, 0, 10)], [5, 5], 5),
        (10, [I(3, 0, 10), I(1, 0, 10)], [7.5, 2.5], 2.5),
        (10, [I(3, 0, 5), I(1, 0, 10)], [5, 5], 5),  # the sweep path
        (0, [I(3, 0, 5)], [0], 0),
        (4, [I(2, 2, 5), I(4, 2, 5)], [2, 2], 0.5),  # constrained from below
        (10, [I(2, 2, 5), I(4, 2, 5)], [5, 5], 2.5),  # constrained from above
        # Tied relative bounds, crossed in Go's order (lower 0, upper 0, lower 1, ...: a stable
        # insertion sort): the float sums come out exact, where another order of the ties gives
        # 0.4999999999998331 each, which rounds to a limit of 0 instead of 1.
        (1, [I(7, 0, 0), I(0, 0, 1000), I(0, 0, 1000)], [0, 0.5, 0.5], 500),
    ],
)
def test_vectors(required: int, items: list[I], allocs: list[float], fair: float) -> None:
    got, fair_prop = compute_concurrency_allocation(required, items)
    assert got == allocs
    assert fair_prop == fair


@pytest.mark.parametrize(
    ("required", "items", "message"),
    [
        (-1, [I(1, 0, 1)], "negative sums are not supported"),
        (1, [I(1, -1, 1)], "negative lower bounds are not allowed"),
        (1, [I(1, 2, 3)], "which is below its lower bound"),
        (1, [I(1, 1, 0.5)], "should not be less than the lower bound"),
        (1, [I(3, 2, 3)], "higher than the required sum of 1"),
        (9, [I(1, 0, 3)], "lower than the required sum of 9"),
    ],
)
def test_errors(required: int, items: list[I], message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        compute_concurrency_allocation(required, items)


def _rel_diff(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def _split(rng: random.Random, total: int, parts: int) -> list[float]:
    cuts = sorted(rng.random() for _ in range(parts - 1))
    edges = [0.0, *cuts, 1.0]
    return [(edges[i + 1] - edges[i]) * total for i in range(parts)]


def _problem(rng: random.Random) -> tuple[int, list[I], float, float]:
    """The generator shape of the Kubernetes TestConcAlloc."""
    length = rng.choice([0, 1, 2, 3, 4, 6, 9])
    items: list[I] = []
    required = 0
    if length > 0:
        style = rng.randrange(20)
        if style == 0:  # bound from below
            required = rng.randrange(3 * length)
            for part in _split(rng, required, length):
                items.append(I(part + 2 * rng.random(), part, part + 3 * rng.random()))
        elif style == 1:  # bound from above
            required = rng.randrange(3 * length) + 1
            for part in _split(rng, required, length):
                lb = part * max(0.0, 1.25 * rng.random() - 1)
                items.append(I(lb + rng.random(), lb, part))
        else:  # not set by bounds
            for _ in range(length):
                x = max(0.0, 5 * rng.random() - 1)
                items.append(I(x + 2 * rng.random(), x, x + 3 * rng.random()))
            low = sum(item.lower_bound for item in items)
            high = sum(item.upper_bound for item in items)
            required = go_round(low + (high - low) * rng.random())
    while True:
        u = rng.random()
        if u >= 0.25:
            break
        previous = len(items)
        items.append(I(0.0, 0.0, u + 0.00001))
        if previous > 1:
            j = rng.randrange(previous)
            items[j], items[-1] = items[-1], items[j]
    low_sum = sum(item.lower_bound for item in items)
    high_sum = sum(item.upper_bound for item in items)
    return required, items, low_sum, high_sum


def test_property_10000_random_problems() -> None:
    rng = random.Random(1234567890)
    solved = errors = 0
    for _ in range(10_000):
        required, items, low_sum, high_sum = _problem(rng)
        expect_error = low_sum - required > 1e-10 or required - high_sum > 1e-10
        try:
            allocs, fair_prop = compute_concurrency_allocation(required, items)
        except AllocationError:
            assert expect_error, (required, items)
            errors += 1
            continue
        assert not expect_error, (required, items)
        solved += 1
        assert _rel_diff(sum(allocs), required) <= 1e-10, (required, items, allocs)
        for item, alloc in zip(items, allocs, strict=True):
            a = fair_prop * max(item.target, 0.001)
            if a <= item.lower_bound:
                assert alloc == item.lower_bound
            elif a >= item.upper_bound:
                assert alloc == item.upper_bound
            else:
                assert _rel_diff(a, alloc) <= 1e-10
    # The generator reaches both outcomes.
    assert solved > 5000
    assert errors > 0
