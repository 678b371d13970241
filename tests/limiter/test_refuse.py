"""``Limiter.classify`` and ``Limiter.refuse``: a cap kept outside the limiter."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from apf_limiter import Limiter, Rejected, RequestDigest
from apf_limiter._observer import Observer
from tests.asgi.apps import level_config


class _Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        self.events.append(("arrived", priority_level, flow_schema))

    def request_rejected(
        self, priority_level: str, flow_schema: str, reason: Any, queue_wait: float, exempt: bool
    ) -> None:
        self.events.append(("rejected", priority_level, flow_schema, reason, queue_wait, exempt))


def test_classify_counts_nothing_and_refuse_reports_like_a_rejection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = _Recorder()
    limiter = Limiter(level_config(limit=2), observer=observer)
    assert limiter.classify(RequestDigest(user="alice")) == ("everyone", "test")
    assert observer.events == []
    assert limiter.statistics().flow_schemas["everyone"].matched == 0
    with caplog.at_level(logging.DEBUG, logger="apf_limiter"):
        rejected = limiter.refuse("everyone", "test", "long-running-limit", retry_after=1)
    assert isinstance(rejected, Rejected)
    assert (rejected.reason, rejected.flow_schema, rejected.priority_level) == (
        "long-running-limit",
        "everyone",
        "test",
    )
    assert rejected.retry_after == 1
    assert observer.events == [("rejected", "test", "everyone", "long-running-limit", 0.0, False)]
    assert "request rejected (long-running-limit)" in caplog.text
