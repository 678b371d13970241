"""The shell's one voice: observer events and structured logs, each from one place.

An observer that raises loses its event, never a request: its exceptions are logged once per
method and dropped, so that a bug in metrics code cannot leave a request half-way through
(holding seats, or with the tasks it should have woken asleep).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

from apf_limiter._errors import ConfigError
from apf_limiter._observer import Observer
from apf_limiter.config._changes import (
    configuration_changes,
    describe_adaptive,
    describe_enforcement,
)
from apf_limiter.config._model import Configuration
from apf_limiter.engine._request import Request

logger = logging.getLogger("apf_limiter")


class Reporter:
    """Reports a limiter's events to its observer and its logger.

    Args:
        observer: Receives every request's events; ``None`` costs nothing.
    """

    __slots__ = ("observer", "_failures")

    def __init__(self, observer: Observer | None) -> None:
        self.observer = observer
        self._failures: set[str] = set()

    def notify(self, event: str, *args: Any) -> None:
        """Call the observer's method ``event``: an exception is reported and dropped."""
        try:
            getattr(self.observer, event)(*args)
        except Exception:
            self.failed(event)

    def failed(self, event: str) -> None:
        """Report that the observer's ``event`` raised (call it inside the ``except`` block)."""
        # Inside the except block, the log record carries the traceback.
        if event in self._failures:
            return  # once per method: a broken observer fails on every request
        self._failures.add(event)
        logger.error(
            "the observer's %s raised; its events are dropped, requests go on (reported "
            "once per method)",
            event,
            exc_info=True,
            extra={"observer_event": event},
        )

    def dispatched(self, request: Request, queue_wait: float, exempt: bool) -> None:
        """A request was given its seats after ``queue_wait`` seconds (observer only)."""
        observer = self.observer
        if observer is not None:
            # Inline, not notify(): free unless it raises (zero-cost try).
            try:
                observer.request_dispatched(
                    request.priority_level, request.flow_schema, queue_wait, exempt
                )
            except Exception:
                self.failed("request_dispatched")

    def rejected(self, request: Request, waited: float, exempt: bool) -> None:
        """A request was rejected (queue full, concurrency limit, time-out)."""
        reason: Any = request.reject_reason
        if self.observer is not None:
            self.notify(
                "request_rejected",
                request.priority_level,
                request.flow_schema,
                reason,
                waited,
                exempt,
            )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "request rejected (%s) at priority level %s, flow schema %s",
                reason,
                request.priority_level,
                request.flow_schema,
                extra={
                    "reason": reason,
                    "priority_level": request.priority_level,
                    "flow_schema": request.flow_schema,
                    "retry_after": request.retry_after,
                },
            )

    def refused(
        self, priority_level: str, flow_schema: str, reason: str, retry_after: int, exempt: bool
    ) -> None:
        """A request was refused before it reached the engine (e.g. ``long-running-limit``)."""
        if self.observer is not None:
            self.notify("request_rejected", priority_level, flow_schema, reason, 0.0, exempt)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "request rejected (%s) at priority level %s, flow schema %s",
                reason,
                priority_level,
                flow_schema,
                extra={
                    "reason": reason,
                    "priority_level": priority_level,
                    "flow_schema": flow_schema,
                    "retry_after": retry_after,
                },
            )

    def shadowed(self, request: Request, queue_wait: float | None, reason: str | None) -> None:
        """A shadow-mode request's would-be outcome is known (observer only)."""
        observer = self.observer
        if observer is None:
            return
        # Observers written before shadow mode, not derived from Observer, may lack it.
        method = getattr(observer, "request_shadowed", None)
        if method is not None:
            try:
                method(request.priority_level, request.flow_schema, queue_wait, reason)
            except Exception:
                self.failed("request_shadowed")

    def shadow_refused(self, priority_level: str, flow_schema: str, reason: str) -> None:
        """A cap kept outside the limiter would have refused a shadow-mode request."""
        observer = self.observer
        method = None if observer is None else getattr(observer, "request_shadowed", None)
        if method is not None:
            try:
                method(priority_level, flow_schema, None, reason)
            except Exception:
                self.failed("request_shadowed")

    def orphan(self, request: Request) -> None:
        """A request was given seats after its event loop had closed."""
        logger.warning(
            "a request was given its seats after its event loop had closed; "
            "they go back (priority level %s, flow schema %s)",
            request.priority_level,
            request.flow_schema,
            extra={"priority_level": request.priority_level, "flow_schema": request.flow_schema},
        )

    def removed_levels(self, names: Sequence[str]) -> None:
        """Levels that drained after leaving the configuration were dropped."""
        for name in names:
            logger.info(
                "priority level %s drained and removed", name, extra={"priority_level": name}
            )

    def quiescing(self, name: str) -> None:
        """A level left the configuration while busy: it drains before it goes."""
        logger.info(
            "priority level %s removed while busy; it drains before it disappears",
            name,
            extra={"priority_level": name},
        )
        if self.observer is not None:
            self.notify("level_quiescing", name)

    def borrowing(
        self,
        changes: Mapping[str, tuple[int, int]],
        fair_fraction: float,
        borrowing_regime: int,
    ) -> None:
        """Current limits moved (by borrowing, a new configuration or a level that went)."""
        if not changes:
            return
        if self.observer is not None:
            self.notify("borrowing_adjusted", dict(changes))
        # DEBUG, every move: borrowing is the limiter doing its job every period, nothing an
        # operator acts on, and small levels flap (exempt 0->1, then 1->0, on an idle app).
        # What calls for action is logged at INFO elsewhere (a configuration applied or
        # changed, a level drained and removed, the adaptive limit's large moves); the limits
        # over time are the current_limit_seats metric and the dashboard.
        if logger.isEnabledFor(logging.DEBUG):
            text = ", ".join(f"{name} {old}->{new}" for name, (old, new) in sorted(changes.items()))
            logger.debug(
                "borrowing moved seats: %s",
                text,
                extra={
                    "changes": dict(changes),
                    "fair_fraction": fair_fraction,
                    "borrowing_regime": borrowing_regime,
                },
            )

    def applied_config(self, config: Configuration, previous: Configuration | None = None) -> None:
        """A configuration was applied (over ``previous``, on a reconfiguration or reload).

        The log line names the mode (the enforcement, per level where it differs, and the
        adaptive limit); on a reconfiguration a second line says what changed.
        """
        enforcement = describe_enforcement(config)
        adaptive = describe_adaptive(config.adaptive_concurrency)
        logger.info(
            "configuration applied: enforcement %s, %d priority levels, %d flow schemas, "
            "server concurrency limit %d, adaptive concurrency %s",
            enforcement,
            len(config.priority_levels),
            len(config.flow_schemas),
            config.server_concurrency_limit,
            adaptive,
            extra={
                "enforcement": config.enforcement,
                "priority_level_enforcement": dict(config.priority_level_enforcement),
                "adaptive_concurrency": adaptive,
                "priority_levels": [level.name for level in config.priority_levels],
                "flow_schemas": [schema.name for schema in config.flow_schemas],
                "server_concurrency_limit": config.server_concurrency_limit,
            },
        )
        if previous is not None:
            changes = configuration_changes(previous, config)
            logger.info(
                "configuration changed: %s",
                "; ".join(changes) if changes else "nothing an operator sees",
                extra={"changes": changes},
            )
        if self.observer is not None:
            self.notify("configuration_applied", config)

    def rejected_config(self, error: ConfigError, *, source: object) -> None:
        """A configuration was refused; the running one stays."""
        problems = [str(problem) for problem in error.problems]
        where = source if isinstance(source, str | PathLike) else type(source).__name__
        logger.error(
            "configuration rejected (%s); keeping the running configuration:\n%s",
            where,
            "\n".join(f"  {problem}" for problem in problems),
            extra={"config_source": str(where), "problems": problems},
        )
        if self.observer is not None:
            self.notify("configuration_rejected", error.problems)
