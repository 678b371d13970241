"""The mode in the logs: "configuration applied" names it, a reconfiguration says what changed."""

from __future__ import annotations

import logging

import pytest

from apf_limiter import Limiter
from apf_limiter.config import load_config
from apf_limiter.config._changes import configuration_changes, describe_enforcement
from apf_limiter.testing import FakeClock

_LEVELS = [
    {
        "name": "batch",
        "type": "Limited",
        "limited": {"nominalConcurrencyShares": 10, "limitResponse": {"type": "Reject"}},
    }
]


def _messages(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def test_shadow_to_enforce_leaves_a_trace(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="apf_limiter")
    limiter = Limiter(
        {"serverConcurrencyLimit": 10, "enforcement": "Shadow", "priorityLevels": _LEVELS},
        clock=FakeClock(),
    )
    [applied] = _messages(caplog, "configuration applied")
    assert applied.startswith("configuration applied: enforcement Shadow, 3 priority levels")
    assert applied.endswith("server concurrency limit 10, adaptive concurrency off")
    assert not _messages(caplog, "configuration changed")
    caplog.clear()
    limiter.reconfigure(
        {
            "serverConcurrencyLimit": 20,
            "enforcement": "Enforce",
            "priorityLevels": [],
            "adaptiveConcurrency": {"minLimit": 2, "maxLimit": 40},
        }
    )
    [applied] = _messages(caplog, "configuration applied")
    assert applied.startswith("configuration applied: enforcement Enforce, 2 priority levels")
    assert applied.endswith("adaptive concurrency Gradient 2..40, update every 1s, tolerance 1.2")
    [changed] = _messages(caplog, "configuration changed")
    assert changed == (
        "configuration changed: enforcement Shadow -> Enforce; "
        "server concurrency limit 10 -> 20; "
        "adaptive concurrency off -> Gradient 2..40, update every 1s, tolerance 1.2; "
        "priority level batch removed"
    )
    record = next(r for r in caplog.records if r.getMessage().startswith("configuration changed"))
    assert record.__dict__["changes"][0] == "enforcement Shadow -> Enforce"


def test_per_level_enforcement_is_named_and_its_switch_logged() -> None:
    shadow_batch = load_config(
        {"priorityLevels": _LEVELS, "priorityLevelEnforcement": {"batch": "Shadow"}}
    )
    assert describe_enforcement(shadow_batch) == "Enforce (Shadow: batch)"
    enforced = load_config({"priorityLevels": _LEVELS})
    assert configuration_changes(shadow_batch, enforced) == [
        "priority level batch enforcement Shadow -> Enforce"
    ]
    # A level that follows the server-wide switch is not listed again.
    shadow = load_config({"priorityLevels": _LEVELS, "enforcement": "Shadow"})
    assert configuration_changes(shadow, enforced) == ["enforcement Shadow -> Enforce"]
    changed = load_config(
        {"priorityLevels": [{**_LEVELS[0], "limited": {"nominalConcurrencyShares": 20}}]}
    )
    assert configuration_changes(enforced, changed) == ["priority level batch changed"]
    assert configuration_changes(enforced, enforced) == []
