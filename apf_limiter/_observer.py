"""The observer interface: how metrics and logs hang off the shell, never off the engine.

A :class:`~apf_limiter.Limiter` calls its observer (if it has one) at each step of a
request's life. With no observer the fast path pays nothing but one ``is None`` test. Gauges
and counters that the engine already keeps (limits, seats, waiting and executing requests,
dispatched and rejected counts) are better read from :meth:`Limiter.statistics` at scrape time;
the events below carry what only the moment knows (wait and execution times, queue lengths).
"""

from __future__ import annotations

from apf_limiter._errors import ConfigProblem, RejectReason
from apf_limiter.config._model import Configuration


class Observer:
    """Receives a limiter's events. Subclass and override what you need; all default to no-ops.

    Methods run synchronously inside the limiter's calls, on the event loop: keep them cheap.
    An exception from one is logged (ERROR on the ``apf_limiter`` logger, once per method) and
    dropped: the event is lost, never a request or its seats.
    """

    def request_arrived(self, priority_level: str, flow_schema: str, seats: int) -> None:
        """A request was classified; ``seats`` is its width (max of initial and final seats)."""

    def request_enqueued(self, priority_level: str, flow_schema: str, queue_length: int) -> None:
        """A request joined a queue that is now ``queue_length`` long."""

    def request_dispatched(
        self, priority_level: str, flow_schema: str, queue_wait: float, exempt: bool
    ) -> None:
        """A request started executing after ``queue_wait`` seconds (0 when admitted at once)."""

    def request_rejected(
        self,
        priority_level: str,
        flow_schema: str,
        reason: RejectReason,
        queue_wait: float,
        exempt: bool,
    ) -> None:
        """A request ended without executing (``time-out`` also when its waiter went away).

        ``long-running-limit``: the middleware's ``max_long_running`` cap refused it on arrival
        (through :meth:`Limiter.refuse`; the engine never saw it).
        """

    def request_cancelled(self, priority_level: str, flow_schema: str, queue_wait: float) -> None:
        """A waiting request's task was cancelled (also reported as a ``time-out`` rejection)."""

    def request_finished(
        self, priority_level: str, flow_schema: str, execution_time: float
    ) -> None:
        """An executing request's body ended (normally or not) after ``execution_time`` s."""

    def request_shadowed(
        self,
        priority_level: str,
        flow_schema: str,
        queue_wait: float | None,
        reason: str | None,
    ) -> None:
        """What enforcing would have done to a request that ran in shadow mode, once known.

        ``queue_wait`` is the wait it would have had (0.0: it would have run at once), or
        ``None`` when it would have been rejected for ``reason`` (``queue-full``,
        ``concurrency-limit``, ``time-out``); ``reason`` ``dropped``: its twin was dropped by
        the limiter's ``max_shadow_twins`` cap while still queued. Called once per request: a
        twin dropped after it got its seats was reported with its wait then. The request
        itself was reported as dispatched at once and finished, as it ran.
        """

    def configuration_applied(self, config: Configuration) -> None:
        """A configuration was applied (at start and on every reconfiguration)."""

    def configuration_rejected(self, problems: tuple[ConfigProblem, ...]) -> None:
        """A configuration failed validation and was not applied."""

    def borrowing_adjusted(self, changes: dict[str, tuple[int, int]]) -> None:
        """A borrowing adjustment ran; ``changes`` maps level names to (old, new) limits."""

    def level_quiescing(self, priority_level: str) -> None:
        """A level left the configuration while busy; it drains, then disappears."""
