"""A smoke run of the aiohttp front door's cost benchmark (real servers, a few requests)."""

from __future__ import annotations

import pytest

from benchmarks.aiohttp_bench import measure

pytestmark = pytest.mark.timeout(60)


async def test_every_variant_is_measured_against_bare_in_the_same_rounds() -> None:
    result = await measure(2, 50)
    assert set(result) == {"bare", "noop", "admit", "apf"}
    assert result["bare"]["ratio"] == 1.0
    assert all(row["us"] > 0 for row in result.values())
