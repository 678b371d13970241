"""Who is being rejected: a bounded count of rejections by flow, over the last minute.

A level may see a million distinct flows (a distinguisher is client-chosen: a header, an
address), so counting each one exactly would let clients grow the limiter's memory without
bound. :class:`SpaceSaving` is Metwally, Agrawal and El Abbadi's Space-Saving sketch: at most
``capacity`` counters; a new flow that finds them all taken replaces the flow with the smallest
count and inherits that count (plus one). Every flow rejected more than ``total / capacity``
times is guaranteed to be kept, and a kept flow's count overestimates its true count by at most
its ``error`` (the count it inherited). Every operation is O(1): counters are grouped by count,
and the smallest count only ever moves up one at a time.

:class:`RejectedFlows` rotates two sketches of :data:`WINDOW_SECONDS` each by ``now``, so what
it reports covers between half a minute and a minute, never older rejections.

Only the rejection path feeds it (``Controller._record_drop``): the fast path pays nothing.
"""

from __future__ import annotations

from typing import Final

from apf_limiter.engine._dump import FlowCount

#: Counters per sketch: any flow above 1/64 of a half-minute's rejections is always kept.
SKETCH_CAPACITY: Final = 64
#: Each sketch covers this many seconds; the two together at most twice as much (a minute).
WINDOW_SECONDS: Final = 30.0

Flow = tuple[str, str]  # (flow schema, distinguisher)


class SpaceSaving:
    """The Space-Saving heavy-hitters sketch over flows, with at most ``capacity`` counters.

    Args:
        capacity: The most flows it keeps (at least 1).
    """

    __slots__ = ("_buckets", "_min_count", "capacity", "counts", "errors", "total")

    def __init__(self, capacity: int = SKETCH_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self.counts: dict[Flow, int] = {}
        self.errors: dict[Flow, int] = {}
        # Flows by count (dictionaries as ordered sets: the oldest flow of the smallest count
        # is the one replaced).
        self._buckets: dict[int, dict[Flow, None]] = {}
        self._min_count = 0
        self.total = 0

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, flow: Flow) -> None:
        """Count one occurrence of ``flow``."""
        self.total += 1
        counts = self.counts
        count = counts.get(flow)
        if count is None:
            if len(counts) < self.capacity:
                counts[flow] = 1
                self.errors[flow] = 0
                self._bucket(1)[flow] = None
                self._min_count = 1
                return
            # Full: the new flow takes the place (and the count) of a least-counted one.
            count = self._min_count
            smallest = self._buckets[count]
            evicted = next(iter(smallest))
            del smallest[evicted]
            del counts[evicted]
            del self.errors[evicted]
            smallest[flow] = None
            counts[flow] = count
            self.errors[flow] = count
        self._move_up(flow, count)

    def _bucket(self, count: int) -> dict[Flow, None]:
        bucket = self._buckets.get(count)
        if bucket is None:
            bucket = self._buckets[count] = {}
        return bucket

    def _move_up(self, flow: Flow, count: int) -> None:
        bucket = self._buckets[count]
        del bucket[flow]
        if not bucket:
            del self._buckets[count]
            if self._min_count == count:
                self._min_count = count + 1  # the flow itself is there now
        self.counts[flow] = count + 1
        self._bucket(count + 1)[flow] = None

    def items(self) -> list[FlowCount]:
        """Every kept flow with its count and error (unordered)."""
        errors = self.errors
        return [
            FlowCount(flow[0], flow[1], count, errors[flow]) for flow, count in self.counts.items()
        ]


class RejectedFlows:
    """Rejections by flow at one priority level over the last minute, in bounded memory.

    Two :class:`SpaceSaving` sketches rotate every :data:`WINDOW_SECONDS` by the ``now`` they
    are given: the current one counts, the previous one still reports.
    """

    __slots__ = ("_current", "_previous", "_started")

    def __init__(self) -> None:
        self._current = SpaceSaving()
        self._previous = SpaceSaving()
        self._started = 0.0

    def record(self, flow_schema: str, distinguisher: str, now: float) -> None:
        """Count one rejection (or ended wait) of the flow at time ``now``."""
        self._rotate(now)
        self._current.add((flow_schema, distinguisher))

    def _rotate(self, now: float) -> None:
        started = self._started
        if now < started + WINDOW_SECONDS:
            return
        if now < started + 2 * WINDOW_SECONDS and len(self._current):
            self._previous = self._current
        else:
            self._previous = SpaceSaving()
        self._current = SpaceSaving()
        # Windows are aligned, so that what the two cover never exceeds a minute.
        self._started = now - now % WINDOW_SECONDS

    def sketches(self) -> tuple[SpaceSaving, SpaceSaving]:
        """The current and the previous sketch (for tests of the memory bound)."""
        return self._current, self._previous

    def top(self, now: float) -> tuple[FlowCount, ...]:
        """The flows rejected in the last minute, most rejected first (a pure read).

        At most twice :data:`SKETCH_CAPACITY` flows; counts and errors of both windows are
        added. Ranked by the guaranteed count (``rejections - error``), then the estimate;
        ties go by flow schema, then distinguisher, so the order is stable.
        """
        started = self._started
        if now >= started + 2 * WINDOW_SECONDS:
            return ()
        merged: dict[Flow, list[int]] = {}
        windows = [self._current]
        if now < started + WINDOW_SECONDS:
            windows.append(self._previous)
        for sketch in windows:
            errors = sketch.errors
            for flow, count in list(sketch.counts.items()):
                entry = merged.get(flow)
                if entry is None:
                    merged[flow] = [count, errors.get(flow, 0)]
                else:
                    entry[0] += count
                    entry[1] += errors.get(flow, 0)
        flows = [FlowCount(flow[0], flow[1], entry[0], entry[1]) for flow, entry in merged.items()]
        flows.sort(key=_rank)
        return tuple(flows)


def _rank(flow: FlowCount) -> tuple[int, int, str, str]:
    # By the count it is sure of: after a flood of one-off flows, each of them holds a large
    # inherited count (its error), and ranked by that it would pass for a flooder.
    return (flow.error - flow.rejections, -flow.rejections, flow.flow_schema, flow.distinguisher)
