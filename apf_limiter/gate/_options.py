"""The gate's option values (protocol-neutral; the front doors re-export them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from apf_limiter._checks import check_timeout, deadline_seconds


@dataclass(frozen=True, slots=True)
class SlowClients:
    """Deadlines and the minimum body rate: what bounds a slow or stalled request.

    Kubernetes bounds every request that is not long-running with a deadline
    (``--request-timeout``, 60 s); the body rate is Kestrel's ``MinRequestBodyDataRate``.

    Attributes:
        request_timeout: Seconds from arrival (queue wait included) after which a request is
            cancelled and its seats returned (HTTP answers 504, or aborts a started
            response); a long-running one only until its response starts. ``None``: none.
        by_level: Deadlines by priority-level name (``None`` for none there), before
            ``request_timeout``; a request's own deadline (a route's) comes first.
        min_body_rate: Bytes per second a request body must keep up with, after ``grace``
            seconds of waiting for it (HTTP answers 408). ``None``: no minimum.
        grace: The grace period of ``min_body_rate``, in seconds.

    Raises:
        ValueError: If a value is out of range.
    """

    request_timeout: float | None = 60.0
    by_level: Mapping[str, float | None] | None = None
    min_body_rate: float | None = 240.0
    grace: float = 5.0

    def __post_init__(self) -> None:
        deadline_seconds("request_timeout", self.request_timeout)
        for timeout in (self.by_level or {}).values():
            deadline_seconds("request_timeout_by_level", timeout)
        if self.min_body_rate is not None:
            check_timeout("min_body_rate", self.min_body_rate)  # a positive number, like a time
        check_timeout("body_rate_grace", self.grace)

    def level_timeouts(self) -> dict[str, float]:
        """The deadlines by level, in seconds (``math.inf``: none)."""
        return {
            name: deadline_seconds("request_timeout_by_level", timeout)
            for name, timeout in (self.by_level or {}).items()
        }
