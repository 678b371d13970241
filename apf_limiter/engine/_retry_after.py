"""The dropped-requests tracker: the ``Retry-After`` value of each priority level.

Kubernetes adapts the ``Retry-After`` of rejected requests per priority level, in the manner of
TCP congestion control. It starts at 1 second. Whenever a drop falls in a new (whole) second,
the drops of the last ``retry_after`` seconds before that second are counted: at least
``3 * retry_after`` of them doubles the value (up to 32 seconds, and at most once per
``retry_after`` seconds, so one spike does not double it twice); fewer than ``retry_after``
lowers it by one. Nothing changes between drops: the value decays only as drops keep coming in.
Drops within the current second count only from the next evaluation on.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

MAX_RETRY_AFTER: Final = 32
"""The ceiling of ``Retry-After``, in seconds."""


@dataclass(frozen=True, slots=True)
class DroppedRequestsSnapshot:
    """The tracker state of one priority level, for debugging and tests.

    Attributes:
        history: ``(unix_second, drops)`` of past seconds, oldest first.
        current_unix: The second drops are currently counted for.
        current_count: Drops counted in ``current_unix`` so far.
        retry_after: The current ``Retry-After``, in seconds.
        retry_after_update_unix: The second ``retry_after`` was last doubled (0 if never).
    """

    history: tuple[tuple[int, int], ...]
    current_unix: int
    current_count: int
    retry_after: int
    retry_after_update_unix: int


class _LevelStats:
    __slots__ = (
        "current_count",
        "current_unix",
        "history",
        "retry_after",
        "retry_after_update_unix",
    )

    def __init__(self) -> None:
        self.history: deque[tuple[int, int]] = deque()
        self.current_unix = 0
        self.current_count = 0
        self.retry_after = 1
        # 0 lets the first evaluation double at once.
        self.retry_after_update_unix = 0

    def record(self, unix_seconds: int) -> None:
        if unix_seconds == self.current_unix:
            self.current_count += 1
            return
        self._close_second()
        self.current_unix = unix_seconds
        self.current_count = 1
        self._evaluate(unix_seconds)

    def _close_second(self) -> None:
        """Move the current second into the history and drop what no evaluation can need."""
        closed = self.current_unix
        history = self.history
        history.append((closed, self.current_count))
        # Trimmed against the second being closed, with the value before re-evaluation.
        keep = min(2 * self.retry_after, MAX_RETRY_AFTER)
        while history and closed - history[0][0] > keep:
            history.popleft()

    def _evaluate(self, now: int) -> None:
        retry_after = self.retry_after
        dropped = 0
        for unix, count in reversed(self.history):
            if now - unix > retry_after:
                break
            if unix < now:
                dropped += count
        if now - self.retry_after_update_unix >= retry_after and dropped >= 3 * retry_after:
            self.retry_after = min(2 * retry_after, MAX_RETRY_AFTER)
            self.retry_after_update_unix = now
        elif dropped < retry_after and retry_after > 1:
            self.retry_after = retry_after - 1


class DroppedRequestsTracker:
    """Tracks rejected requests per priority level and suggests their ``Retry-After``.

    Levels are independent; a level is tracked from its first recorded drop. Time is passed in
    as whole Unix seconds (the caller floors its clock), so the tracker is deterministic.
    """

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        self._levels: dict[str, _LevelStats] = {}

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={s.retry_after}s" for name, s in self._levels.items())
        return f"<DroppedRequestsTracker {values}>"

    def record_dropped(self, priority_level: str, unix_seconds: int) -> None:
        """Record one rejected request.

        Args:
            priority_level: The name of the request's priority level.
            unix_seconds: The current time in whole seconds.
        """
        stats = self._levels.get(priority_level)
        if stats is None:
            stats = self._levels[priority_level] = _LevelStats()
        stats.record(unix_seconds)

    def retry_after(self, priority_level: str) -> int:
        """The ``Retry-After`` to send now with a rejection at this level.

        Args:
            priority_level: The priority level's name.

        Returns:
            Seconds, 1..32; 1 for a level without recorded drops.
        """
        stats = self._levels.get(priority_level)
        return 1 if stats is None else stats.retry_after

    def snapshot(self, priority_level: str) -> DroppedRequestsSnapshot | None:
        """The state of one level, or ``None`` if it has no recorded drops.

        Args:
            priority_level: The priority level's name.

        Returns:
            A frozen copy of the level's state.
        """
        stats = self._levels.get(priority_level)
        if stats is None:
            return None
        return DroppedRequestsSnapshot(
            history=tuple(stats.history),
            current_unix=stats.current_unix,
            current_count=stats.current_count,
            retry_after=stats.retry_after,
            retry_after_update_unix=stats.retry_after_update_unix,
        )
