"""The exceptions of the public API: :class:`ConfigError` and :class:`Rejected`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

#: Why a request was not executed: the engine's three (Kubernetes' ``rejected_requests_total``
#: reasons), and ``long-running-limit``, the middleware's cap on open long-running requests.
RejectReason = Literal["queue-full", "concurrency-limit", "time-out", "long-running-limit"]


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem found in a configuration.

    Attributes:
        path: The field path, e.g. ``priorityLevels[workload-high].limited.lendablePercent``.
        message: What is wrong, in the Kubernetes wording, e.g.
            ``Invalid value: 101: must be between 0 and 100, inclusive``.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """A configuration failed to load or validate; nothing of it was applied.

    Attributes:
        problems: Every problem found, in the order they were found.
    """

    def __init__(self, problems: Iterable[ConfigProblem | str]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(
            p if isinstance(p, ConfigProblem) else ConfigProblem("", p) for p in problems
        )
        count = len(self.problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"invalid configuration ({count} {noun}):\n{lines}")


class Rejected(Exception):
    """A request was not executed.

    Attributes:
        reason: ``"queue-full"``, ``"concurrency-limit"`` or ``"time-out"`` (the Kubernetes
            ``rejected_requests_total`` reasons; ``time-out`` is a queue wait that hit its limit),
            or ``"long-running-limit"`` (the middleware's ``max_long_running`` cap).
        priority_level: Name of the priority level the request was classified into.
        flow_schema: Name of the flow schema that matched the request.
        retry_after: Seconds the client should wait before retrying (1..32).
        status: The HTTP status an HTTP front door answers with: 429 (the default, as
            Kubernetes), or 503 at a level configured so (``rejectionStatus``,
            ``priorityLevelRejectionStatus``).
        distinguisher: The request's flow distinguisher (``""`` when its level computes none).
    """

    def __init__(
        self,
        reason: RejectReason,
        *,
        priority_level: str,
        flow_schema: str,
        retry_after: int,
        status: int = 429,
        distinguisher: str = "",
    ) -> None:
        self.reason: RejectReason = reason
        self.priority_level = priority_level
        self.flow_schema = flow_schema
        self.retry_after = retry_after
        self.status = status
        self.distinguisher = distinguisher
        super().__init__(
            f"request rejected ({reason}) at priority level {priority_level!r} "
            f"(flow schema {flow_schema!r}); retry after {retry_after}s"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments defeat the default pickling of exceptions.
        return (
            _rebuild_rejected,
            (
                self.reason,
                self.priority_level,
                self.flow_schema,
                self.retry_after,
                self.status,
                self.distinguisher,
            ),
        )


def _rebuild_rejected(
    reason: RejectReason,
    priority_level: str,
    flow_schema: str,
    retry_after: int,
    status: int = 429,
    distinguisher: str = "",
) -> Rejected:
    return Rejected(
        reason,
        priority_level=priority_level,
        flow_schema=flow_schema,
        retry_after=retry_after,
        status=status,
        distinguisher=distinguisher,
    )
