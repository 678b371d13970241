"""What an engine call changed: the one value every entry point of the controller returns.

The shell acts on it (wake the waiters of the dispatched requests, report the limits that moved
and the levels that went) instead of diffing snapshots or polling the engine. The fast path
returns the shared :data:`NO_EFFECTS` and allocates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from apf_limiter.engine._request import Request

_NO_CHANGES: Final[Mapping[str, tuple[int, int]]] = {}


class Effects:
    """What changed in one engine call. Treat it as read-only.

    Attributes:
        dispatched: Requests given their seats, whose waiters the shell wakes (never the
            arriving request of :meth:`Controller.start`: its state says it runs).
        limit_changes: Priority level name to ``(old, new)`` current limit, for every level
            whose limit moved (a new level counts from 0), in the controller's level order.
        removed_levels: Levels dropped because they drained after leaving the configuration.
        quiescing_levels: Levels that left the configuration while busy (they drain first),
            sorted by name.
    """

    __slots__ = ("dispatched", "limit_changes", "removed_levels", "quiescing_levels")

    def __init__(
        self,
        dispatched: Sequence[Request] = (),
        limit_changes: Mapping[str, tuple[int, int]] = _NO_CHANGES,
        removed_levels: Sequence[str] = (),
        quiescing_levels: Sequence[str] = (),
    ) -> None:
        self.dispatched = dispatched
        self.limit_changes = limit_changes
        self.removed_levels = removed_levels
        self.quiescing_levels = quiescing_levels

    def __repr__(self) -> str:
        return (
            f"<Effects dispatched={len(self.dispatched)} limit_changes={dict(self.limit_changes)}"
            f" removed={list(self.removed_levels)} quiescing={list(self.quiescing_levels)}>"
        )


NO_EFFECTS: Final = Effects()
"""The shared value for "nothing changed" (the fast path's answer)."""


def limit_changes(
    before: Mapping[str, int], after: Mapping[str, int]
) -> dict[str, tuple[int, int]]:
    """The limits that moved between two readings (a level absent before counts from 0)."""
    return {
        name: (before.get(name, 0), limit)
        for name, limit in after.items()
        if before.get(name) != limit
    }
