"""``serverConcurrencyLimit`` is a target: the real bound on requests running at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apf_limiter import Limiter, RequestDigest
from apf_limiter.engine._borrowing import BorrowingInput, compute_borrowing
from apf_limiter.engine._concurrency import plan_levels
from apf_limiter.testing import FakeClock
from tests.engine.k8s_bootstrap_levels import catch_all_level, exempt_level, queuing_level
from tests.helpers import EVERYONE_EVERYTHING, limited_level

_LEVEL = st.tuples(
    st.integers(1, 200),  # shares
    st.integers(0, 100),  # lendable percent
    st.one_of(st.none(), st.integers(0, 300)),  # borrowing limit percent
)


@settings(max_examples=300, deadline=None)
@given(
    server_limit=st.integers(1, 2000),
    exempt_shares=st.integers(0, 50),
    shapes=st.lists(_LEVEL, min_size=1, max_size=8),
    demands=st.lists(st.tuples(st.integers(0, 5000), st.floats(0, 5000)), min_size=10),
)
def test_no_borrowing_adjustment_exceeds_the_bound(
    server_limit: int,
    exempt_shares: int,
    shapes: list[tuple[int, int, int | None]],
    demands: list[tuple[int, float]],
) -> None:
    levels = [exempt_level(exempt_shares), catch_all_level()] + [
        queuing_level(f"l{i}", shares, lendable, borrowing_limit_percent=borrowing)
        for i, (shares, lendable, borrowing) in enumerate(shapes)
    ]
    plan = plan_levels(levels, server_limit)
    bound = plan.max_executing_requests
    limited = [level for level in plan.levels if not level.is_exempt]
    assert sum(level.initial_limit for level in limited) <= bound
    assert sum(level.nominal_limit for level in limited) <= bound
    current = [level.initial_limit for level in plan.levels]
    for period in range(3):  # a few adjustments, each from the previous limits
        inputs = [
            BorrowingInput(
                exempt=level.is_exempt,
                nominal_limit=level.nominal_limit,
                lower_limit=level.lower_limit,
                upper_limit=level.upper_limit,
                high_watermark=demands[(index + period) % len(demands)][0],
                smoothed=demands[(index + period) % len(demands)][1],
                current_limit=current[index],
            )
            for index, level in enumerate(plan.levels)
        ]
        current = list(compute_borrowing(plan.nominal_limit_sum, inputs).current_limits)
        running = sum(
            limit for limit, level in zip(current, plan.levels, strict=True) if not level.is_exempt
        )
        assert running <= bound


async def test_a_limit_of_4_can_run_8_requests_and_show_says_so() -> None:
    # Seven limited levels of 1 share beside catch-all's 5: each nominal limit is rounded up
    # to at least 1 seat, so 4 seats of server limit become 9 nominal seats.
    config = {
        "serverConcurrencyLimit": 4,
        "priorityLevels": [limited_level(f"l{i}", 1) for i in range(7)],
        "flowSchemas": [
            {
                "name": f"s{i}",
                "priorityLevelConfiguration": {"name": f"l{i}"},
                "matchingPrecedence": 100 + i,
                "rules": [
                    {
                        "subjects": EVERYONE_EVERYTHING[0]["subjects"],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": [f"/l{i}"]}],
                    }
                ],
            }
            for i in range(7)
        ],
    }
    limiter = Limiter(config, clock=FakeClock())
    running = []
    for path in [f"/l{i}" for i in range(7)] + ["/other"] * 2:
        admission = limiter.admit(RequestDigest(user="u", path=path))
        assert admission.start(), path  # none of them waits
        running.append(admission)
    assert len(running) == 9 > 4
    from apf_limiter.config import load_config
    from apf_limiter.engine._concurrency import plan_configuration

    assert plan_configuration(load_config(config)).max_executing_requests >= 9
    for admission in running:
        admission.release()
