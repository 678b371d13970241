"""The fast-path benchmarks' timing rounds: warmed up, rotated, ratios within a round."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from benchmarks.interleave import interleaved_rounds


async def test_every_variant_is_warmed_up_then_timed_in_rotated_rounds() -> None:
    calls: list[str] = []

    def body(name: str) -> Callable[[], Awaitable[None]]:
        async def call() -> None:
            calls.append(name)

        return call

    result = await interleaved_rounds({v: body(v) for v in "abc"}, "a", rounds=3, n=2)
    warm_up, timed = calls[:3], calls[3:]
    assert warm_up == ["a", "b", "c"]
    assert "".join(timed) == "aabbcc" + "bbccaa" + "ccaabb"  # no variant is always first
    assert set(result) == {"a", "b", "c"}
    assert result["a"][1] == 1.0  # the baseline against itself, round by round
    assert all(seconds > 0 for seconds, _ in result.values())
