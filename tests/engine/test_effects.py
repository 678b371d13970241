"""What the controller's entry points report they changed (the Effects value)."""

from __future__ import annotations

from typing import Any

from apf_limiter import RequestDigest, load_config
from apf_limiter.engine._controller import Controller
from apf_limiter.engine._effects import NO_EFFECTS
from apf_limiter.engine._request import RequestState
from tests.helpers import limited_level, subject_schema


def _config(*, with_b: bool = True) -> dict[str, Any]:
    levels = [limited_level("a", 10, queues=1, hand_size=1, queue_length_limit=50)]
    schemas = [subject_schema("a", "a", group="team-a")]
    if with_b:
        levels.append(limited_level("b", 10, lendable=100, queues=1, hand_size=1))
        schemas.append(subject_schema("b", "b", group="team-b"))
    return {
        "serverConcurrencyLimit": 20,
        "priorityLevels": levels,
        "flowSchemas": schemas,
    }


def _digest(group: str) -> RequestDigest:
    return RequestDigest(user="u", groups=(group,))


def _a_limit(controller: Controller) -> int:
    return controller.statistics().priority_levels["a"].current_limit


def test_the_fast_path_reports_nothing_with_the_shared_empty_value() -> None:
    controller = Controller(load_config(_config()), hash_seed=1, now=0.0)
    request, effects = controller.start(_digest("team-a"), 0.0)
    assert request.state is RequestState.EXECUTING
    assert effects is NO_EFFECTS
    assert controller.finish(request, 0.1) is NO_EFFECTS


def test_a_finish_reports_whom_its_seat_went_to_and_never_the_arrival_itself() -> None:
    controller = Controller(load_config(_config()), hash_seed=1, now=0.0)
    limit = _a_limit(controller)
    running = [controller.start(_digest("team-a"), 0.0)[0] for _ in range(limit)]
    waiting, effects = controller.start(_digest("team-a"), 0.0)
    assert waiting.state is RequestState.WAITING and effects is NO_EFFECTS
    effects = controller.finish(running[0], 1.0)
    assert list(effects.dispatched) == [waiting]
    assert effects.limit_changes == {} and list(effects.removed_levels) == []


def test_a_borrowing_adjustment_reports_the_limits_it_moved() -> None:
    controller = Controller(load_config(_config()), hash_seed=1, now=0.0)
    limit = _a_limit(controller)
    for _ in range(limit + 5):  # a's demand exceeds its limit; b is idle and lends
        controller.start(_digest("team-a"), 0.0)
    effects = controller.adjust_borrowing(10.0)
    new = _a_limit(controller)
    assert new > limit
    assert effects.limit_changes["a"] == (limit, new)
    assert all(old != now for old, now in effects.limit_changes.values())
    assert len(effects.dispatched) == new - limit
    assert controller.adjust_borrowing(10.0).limit_changes == {}  # nothing moves twice


def test_a_busy_level_removed_quiesces_then_its_last_finish_reports_it_gone() -> None:
    controller = Controller(load_config(_config()), hash_seed=1, now=0.0)
    busy, _ = controller.start(_digest("team-b"), 0.0)
    effects = controller.apply(load_config(_config(with_b=False)), 1.0)
    assert list(effects.quiescing_levels) == ["b"]
    assert "b" in controller.levels
    effects = controller.finish(busy, 2.0)
    assert list(effects.removed_levels) == ["b"]
    assert "b" not in controller.levels
    # a gets b's seats back: the change is reported, as for any adjustment
    assert effects.limit_changes["a"][1] > effects.limit_changes["a"][0]
