"""The queue-set fairness scenarios of the Kubernetes tests, reproduced in fake time."""

from __future__ import annotations

import pytest

from tests.engine.scenario import NS, Client, Scenario, check_fairness, fair_alloc, run

S = NS
MS = NS // 1000


def test_fair_alloc_reference_vectors() -> None:
    assert fair_alloc([0, 0], 42) == [0, 0]
    assert fair_alloc([47, 0], 42) == [42, 0]
    assert fair_alloc([1, 47], 42) == [1, 41]
    assert fair_alloc([3, 7, 9, 1], 14) == [3, 5, 5, 1]
    assert fair_alloc([1, 9, 7, 3], 21) == [1, 9, 7, 3]


async def _check(scenario: Scenario) -> None:
    measured = await run(scenario)
    assert check_fairness(scenario, measured) == []


async def test_baseline() -> None:
    await _check(
        Scenario(
            "baseline",
            queues=9,
            queue_length_limit=8,
            hand_size=3,
            concurrency_limit=1,
            clients=[Client(1001001001, 1, 21, S, 0)],
            eval_ns=20 * S,
            margins=(0.0,),
        )
    )


@pytest.mark.parametrize("limit", [0, 2])
async def test_exempt(limit: int) -> None:
    await _check(
        Scenario(
            "exempt",
            queues=-1,
            queue_length_limit=2,
            hand_size=3,
            concurrency_limit=limit,
            clients=[Client(1001001001, 5, 20, S, S, seats=3)],
            eval_ns=40 * S,
            expected_averages=[[7.5]],
            margins=(1e-8,),
        )
    )


async def test_uniform_flows_hand_size_1() -> None:
    await _check(
        Scenario(
            "uniform-flows-hand-size-1",
            queues=9,
            queue_length_limit=8,
            hand_size=1,
            concurrency_limit=4,
            clients=[
                Client(1001001001, 8, 20, S, S - 1),
                Client(2002002002, 8, 20, S, S - 1),
            ],
            eval_ns=50 * S,
            expected_averages=[[2, 2]],
            margins=(0.01,),
        )
    )


async def test_uniform_flows_hand_size_3() -> None:
    await _check(
        Scenario(
            "uniform-flows-hand-size-3",
            queues=8,
            queue_length_limit=16,
            hand_size=3,
            concurrency_limit=4,
            clients=[
                Client(400900100100, 8, 30, S, S - 1),
                Client(300900200200, 8, 30, S, S - 1),
            ],
            eval_ns=60 * S,
            expected_averages=[[2, 2]],
            margins=(0.03,),
        )
    )


async def test_different_flows_expect_equal() -> None:
    await _check(
        Scenario(
            "different-flows-expect-equal",
            queues=9,
            queue_length_limit=8,
            hand_size=1,
            concurrency_limit=4,
            clients=[
                Client(1001001001, 8, 20, S, S),
                Client(2002002002, 7, 30, S, S // 2),
            ],
            eval_ns=40 * S,
            expected_averages=[[2, 2]],
            margins=(0.01,),
        )
    )


async def test_seat_seconds_rollover() -> None:
    quarter = 91 * 24 * 60 * 60 * S
    await _check(
        Scenario(
            "seat-seconds-rollover",
            queues=9,
            queue_length_limit=8,
            hand_size=1,
            concurrency_limit=2000,
            clients=[
                Client(1001001001, 8, 20, quarter, quarter, seats=500),
                Client(2002002002, 7, 30, quarter, quarter // 2, seats=500),
            ],
            eval_ns=40 * quarter,
            expected_averages=[[1000, 1000]],
            margins=(0.01,),
            expected_epoch_advances=8,
        )
    )


async def test_different_flows_expect_unequal() -> None:
    await _check(
        Scenario(
            "different-flows-expect-unequal",
            queues=9,
            queue_length_limit=6,
            hand_size=1,
            concurrency_limit=3,
            clients=[
                Client(1001001001, 4, 20, S, S - 1),
                Client(2002002002, 2, 20, S, S - 1),
            ],
            eval_ns=20 * S,
            expected_averages=[[2, 1]],
            margins=(0.01,),
        )
    )


async def test_different_widths() -> None:
    await _check(
        Scenario(
            "different-widths",
            queues=64,
            queue_length_limit=13,
            hand_size=7,
            concurrency_limit=6,
            clients=[
                Client(10010010010010, 13, 10, S, S - 1, seats=1),
                Client(20020020020020, 7, 10, S, S - 1, seats=2),
            ],
            eval_ns=20 * S,
            expected_averages=[[3, 3]],
            margins=(0.155,),
        )
    )


async def test_too_wide() -> None:
    narrow = [
        Client(h, 15, 21, S, S - 1, seats=2)
        for h in (40040040040040, 50050050050050, 60060060060060, 70070070070070)
    ]
    await _check(
        Scenario(
            "too-wide",
            queues=64,
            queue_length_limit=35,
            hand_size=7,
            concurrency_limit=6,
            clients=[*narrow, Client(90090090090090, 15, 21, S, S - 1, seats=7)],
            eval_ns=400 * S,
            expected_averages=[[1.2] * 5],
            margins=(0.35,),
        )
    )


@pytest.mark.parametrize(("second_half_margin", "second_half_fair"), [(0.26, True), (0.1, False)])
async def test_windup(second_half_margin: float, second_half_fair: bool) -> None:
    await _check(
        Scenario(
            "windup",
            queues=9,
            queue_length_limit=6,
            hand_size=1,
            concurrency_limit=3,
            clients=[
                Client(1001001001, 2, 40, S, -1),
                Client(2002002002, 2, 40, S, -1, split=True),
            ],
            eval_ns=40 * S,
            expected_averages=[[2, 1], [1.5, 1.5]],
            margins=(0.01, second_half_margin),
            expect_fair=(True, second_half_fair),
        )
    )


async def test_different_flows_without_queuing() -> None:
    scenario = Scenario(
        "different-flows-without-queuing",
        queues=0,
        queue_length_limit=0,
        hand_size=0,
        concurrency_limit=4,
        clients=[
            Client(1001001001, 6, 10, S, 57 * MS),
            Client(2002002002, 4, 15, S, 750 * MS),
        ],
        eval_ns=13 * S,
        expected_averages=[[2, 2]],
        margins=(0.20,),
        expect_fair=(False,),
        expect_all_requests=False,
    )
    await _check(scenario)
    assert sum(scenario.rejections) > 0
    assert scenario.reject_reasons == {"concurrency-limit"}


# (think, pad, final seats, concurrency limit, clients) -> expected averages (None: computed)
SEPARATIONS: list[tuple[int, int, int, int, int, list[float] | None]] = [
    (S, 0, 1, 1, 1, None),
    (S, 0, 1, 2, 1, None),
    (S, 0, 2, 2, 1, None),
    (S, 0, 1, 1, 2, None),
    (S, 0, 1, 2, 2, None),
    (S, 0, 2, 2, 2, None),
    (0, S, 1, 1, 1, [0.5]),
    (0, S, 1, 2, 1, None),
    (0, S, 2, 2, 1, [0.5]),
    (0, S, 1, 1, 2, [0.25, 0.25]),
    (0, S, 1, 2, 2, [0.5, 0.5]),
    (0, S, 2, 2, 2, [0.25, 0.25]),
    (S, S // 2, 1, 1, 1, None),
    (S, S // 2, 1, 2, 1, None),
    (S, S // 2, 2, 2, 1, None),
    (S, S // 2, 1, 1, 2, [1 / 3, 1 / 3]),
    (S, S // 2, 1, 2, 2, None),
    (S, S // 2, 2, 2, 2, [1 / 3, 1 / 3]),
    (S // 2, S, 1, 1, 1, [0.5]),
    (S // 2, S, 1, 2, 1, None),
    (S // 2, S, 2, 2, 1, [0.5]),
    (S // 2, S, 1, 1, 2, [0.25, 0.25]),
    (S // 2, S, 1, 2, 2, [0.5, 0.5]),
    (S // 2, S, 2, 2, 2, [0.25, 0.25]),
]


@pytest.mark.parametrize(("think", "pad", "final", "limit", "clients", "expected"), SEPARATIONS)
async def test_separations(
    think: int, pad: int, final: int, limit: int, clients: int, expected: list[float] | None
) -> None:
    hashes = [1001001001, 2002002002]
    await _check(
        Scenario(
            f"separation-{think}-{pad}-{final}-{limit}-{clients}",
            queues=9,
            queue_length_limit=8,
            hand_size=3,
            concurrency_limit=limit,
            clients=[
                Client(hashes[i], 1, 25, S, think, final_seats=final, pad_ns=pad)
                for i in range(clients)
            ],
            eval_ns=24 * S,
            expected_averages=None if expected is None else [expected],
            margins=(0.0,),
        )
    )
