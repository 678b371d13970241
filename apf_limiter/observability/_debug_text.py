r"""The Kubernetes APF debug text: the priority levels, queues and requests tables.

The public names keep Kubernetes' (``dump_priority_levels``, ..., the endpoints'
``/dump_*`` paths, :class:`Dump`); in private code "dump" means only the engine's read view
(``Limiter.dump()``, the frozen values these tables are built from).

Each dump has the columns of its Kubernetes counterpart
(``/debug/api_priority_and_fairness/dump_*``) and renders as the same text (columns joined by
``",\t"`` and aligned by :func:`~apf_limiter.observability._tabwriter.tabwrite` with Go's
settings) or as JSON rows keyed by column name.

Differences in content, by necessity:

* Levels are listed in configuration order in ``dump_queues`` and ``dump_requests`` (Kubernetes
  uses random map order); ``dump_priority_levels`` sorts by name, as Kubernetes does.
* Kubernetes counts a request whose queue wait ended (deadline or client gone) as both
  rejected and cancelled, and never increments ``TimedoutRequests``. The dump keeps that
  meaning: ``RejectedRequests`` = queue-full + concurrency-limit + timed-out + cancelled,
  ``CancelledRequests`` = timed-out + cancelled, ``TimedoutRequests`` = 0. The split is in
  ``Limiter.statistics()`` and the dashboard feed.
* When any level is in shadow mode, ``dump_priority_levels`` ends in one more column,
  ``Enforcement`` (``Enforce`` or ``Shadow``); the numbers of a shadow level describe its
  virtual twins, what enforcing would have done. Without shadow mode the columns are exactly
  Kubernetes'.
* Times come from the limiter's monotonic clock, mapped to wall-clock time at the moment of
  the dump. ``APIVersion`` is ``group/`` (or empty) since a :class:`RequestDigest` carries no
  API version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apf_limiter.engine._seat_seconds import seat_seconds_str

# Re-exported: the cut's limits, as the text dumps apply them to every cell.
from apf_limiter.observability._cut import CUT_MARK as CUT_MARK
from apf_limiter.observability._cut import MAX_CELL_WIDTH as MAX_CELL_WIDTH
from apf_limiter.observability._cut import cut
from apf_limiter.observability._due import run_due_before_read
from apf_limiter.observability._goformat import go_duration, rfc3339_nano
from apf_limiter.observability._tabwriter import tabwrite
from apf_limiter.observability._top_flows import (
    DEFAULT_TOP,
    check_top,
    hash_key,
    hide,
    top_flows,
)

if TYPE_CHECKING:
    from apf_limiter.engine._dump import LevelDump, RequestDump
    from apf_limiter.limiter import Limiter

Cell = str | int | bool

PRIORITY_LEVEL_COLUMNS = (
    "PriorityLevelName",
    "ActiveQueues",
    "IsIdle",
    "IsQuiescing",
    "WaitingRequests",
    "ExecutingRequests",
    "DispatchedRequests",
    "RejectedRequests",
    "TimedoutRequests",
    "CancelledRequests",
)
#: The column ``dump_priority_levels`` adds when any level is in shadow mode (not Kubernetes').
ENFORCEMENT_COLUMN = "Enforcement"
QUEUE_COLUMNS = (
    "PriorityLevelName",
    "Index",
    "PendingRequests",
    "ExecutingRequests",
    "SeatsInUse",
    "NextDispatchR",
    "InitialSeatsSum",
    "MaxSeatsSum",
    "TotalWorkSum",
)
REQUEST_COLUMNS = (
    "PriorityLevelName",
    "FlowSchemaName",
    "QueueIndex",
    "RequestIndexInQueue",
    "FlowDistingsher",  # sic: the Kubernetes spelling
    "ArriveTime",
    "InitialSeats",
    "FinalSeats",
    "AdditionalLatency",
    "StartTime",
)
TOP_FLOW_COLUMNS = (
    "PriorityLevelName",
    "FlowSchemaName",
    "FlowDistinguisher",
    "SeatsInUse",
    "WaitingRequests",
    "RejectedLastMinute",
)
REQUEST_DETAIL_COLUMNS = (
    "UserName",
    "Verb",
    "APIPath",
    "Namespace",
    "Name",
    "APIVersion",
    "Resource",
    "SubResource",
)


@dataclass(frozen=True, slots=True)
class Dump:
    """One debug dump: a header and rows.

    Attributes:
        columns: The column names, as Kubernetes prints them.
        rows: One tuple of cells per row (strings, integers and booleans).
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]

    def text(self) -> str:
        r"""Render as Kubernetes does: cells joined by ``",\t"``, aligned by a tab writer."""
        lines = [",\t".join(self.columns)]
        lines.extend(",\t".join(_go_text(cell) for cell in row) for row in self.rows)
        return tabwrite("".join(f"{line}\n" for line in lines))

    def json_rows(self) -> list[dict[str, Cell]]:
        """Return the rows as JSON-ready mappings from column name to cell."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def _go_text(cell: Cell) -> str:
    if isinstance(cell, bool):
        return "true" if cell else "false"
    text = str(cell)
    if text.isprintable() and "\\" not in text:
        return cut(text)
    # Client-chosen text (distinguishers, user names, paths) must not change the table: a tab
    # or newline would add columns or forge rows (and a thousand tabs overflow the tab
    # writer's recursion), line separators and bidi overrides would do the same in a viewer,
    # an escape sequence would drive the reader's terminal. Escaped as Go's %q escapes them,
    # the backslash included, so an escape cannot be faked either. Escaping never shortens a
    # character, so only the head that can still show is escaped.
    escaped = [_escape(char) for char in text[: MAX_CELL_WIDTH + 1]]
    if len(text) <= MAX_CELL_WIDTH and sum(map(len, escaped)) <= MAX_CELL_WIDTH:
        return "".join(escaped)
    return cut(text, escaped)


_NAMED_ESCAPES = {
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x80:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def dump_priority_levels(limiter: Limiter) -> Dump:
    """One row per priority level, sorted by name (``dump_priority_levels``).

    When any level is in shadow mode, a last column ``Enforcement`` says which
    (``Enforce`` or ``Shadow``); otherwise the columns are exactly Kubernetes'.
    """
    run_due_before_read(limiter)
    levels = sorted(limiter.dump(waiting=False).levels, key=_name)
    # Only then: tools that parse the Kubernetes dump keep parsing it unchanged.
    shadow = any(level.shadow for level in levels)
    rows: list[tuple[Cell, ...]] = []
    for level in levels:
        stats = level.statistics
        ended_waits = stats.timed_out + stats.cancelled
        rejected = stats.rejected
        row: tuple[Cell, ...] = (
            level.name,
            sum(1 for queue in level.queues if queue.waiting_requests),
            level.is_idle,
            stats.quiescing,
            stats.waiting_requests,
            stats.executing_requests,
            stats.dispatched,
            rejected["queue-full"] + rejected["concurrency-limit"] + ended_waits,
            0,
            ended_waits,
        )
        if shadow:
            row += ("Shadow" if level.shadow else "Enforce",)
        rows.append(row)
    columns = PRIORITY_LEVEL_COLUMNS + ((ENFORCEMENT_COLUMN,) if shadow else ())
    return Dump(columns, tuple(rows))


def _name(level: LevelDump) -> str:
    return level.name


def dump_queues(limiter: Limiter) -> Dump:
    """One row per queue of every queuing level (``dump_queues``)."""
    run_due_before_read(limiter)
    rows: list[tuple[Cell, ...]] = []
    for level in limiter.dump(waiting=False).levels:
        for queue in level.queues:
            rows.append(
                (
                    level.name,
                    queue.index,
                    queue.waiting_requests,
                    len(queue.executing),
                    queue.seats_in_use,
                    seat_seconds_str(queue.next_dispatch_r),
                    queue.initial_seats_sum,
                    queue.max_seats_sum,
                    seat_seconds_str(queue.total_work_sum),
                )
            )
    return Dump(QUEUE_COLUMNS, tuple(rows))


def dump_requests(
    limiter: Limiter,
    *,
    include_details: bool = False,
    wall_clock_ns: Callable[[], int] = time.time_ns,
    hash_distinguishers: bool | bytes = False,
) -> Dump:
    """One row per waiting or executing request (``dump_requests``).

    Per level: for each queue, its waiting requests (with their position) then its executing
    ones (position -1, in order of start); then the queue-less executing requests of exempt
    and ``Reject`` levels (queue index and position -1).

    Args:
        limiter: The limiter to dump.
        include_details: Add the request details columns (``?includeRequestDetails=1``).
        wall_clock_ns: The wall clock, in Unix nanoseconds, that the limiter's clock is mapped
            to for the time columns.
        hash_distinguishers: Show each distinguisher, and the details' user, as ``#`` and 12
            hex digits of its BLAKE2b hash, as :func:`dump_top_flows` does (``True``
            unkeyed, or a key of up to 64 bytes); a flow keeps one hash in both dumps.

    Raises:
        ValueError: If ``hash_distinguishers`` is invalid.
    """
    key = hash_key(hash_distinguishers)
    columns = REQUEST_COLUMNS + (REQUEST_DETAIL_COLUMNS if include_details else ())
    run_due_before_read(limiter)
    mono_now = round(limiter.clock.now() * 1e9)
    offset = wall_clock_ns() - mono_now
    rows: list[tuple[Cell, ...]] = []
    for level in limiter.dump().levels:
        for queue_index, position, request in _requests(level):
            row: tuple[Cell, ...] = (
                level.name,
                request.flow_schema,
                queue_index,
                position,
                hide(request.distinguisher, key),
                rfc3339_nano(offset + round(request.arrival_time * 1e9)),
                request.initial_seats,
                request.final_seats,
                go_duration(request.additional_latency_ns),
                rfc3339_nano(None if position >= 0 else offset + round(request.start_time * 1e9)),
            )
            if include_details:
                row += _details(request, key)
            rows.append(row)
    return Dump(columns, tuple(rows))


def _requests(level: LevelDump) -> Iterator[tuple[int, int, RequestDump]]:
    for queue in level.queues:
        for position, request in enumerate(queue.waiting):
            yield queue.index, position, request
        for request in queue.executing:  # in order of start
            yield queue.index, -1, request
    for request in level.queueless_executing:
        yield -1, -1, request


def _details(request: RequestDump, key: bytes | None) -> tuple[Cell, ...]:
    digest = request.digest
    if digest is None:
        return ("",) * len(REQUEST_DETAIL_COLUMNS)
    version = str(getattr(digest, "api_version", ""))
    api_version = f"{digest.api_group}/{version}" if digest.api_group else version
    return (
        hide(digest.user, key),
        digest.verb,
        digest.path,
        digest.namespace,
        digest.name,
        api_version,
        digest.resource,
        digest.subresource,
    )


def dump_top_flows(
    limiter: Limiter, *, top: int = DEFAULT_TOP, hash_distinguishers: bool | bytes = False
) -> Dump:
    """Who is flooding: per level, its top flows by seats, waiting requests and rejections.

    Not a Kubernetes dump (``dump_top_flows``). One row per flow (flow schema and
    distinguisher) that is among the ``top`` of its level by seats in use, by waiting requests
    or by rejections and ended waits over the last minute (at least: the count a bounded
    sketch is sure of), with all three numbers. Levels in configuration order, flows by seats,
    then waiting, then rejections. When any level is in shadow mode, a last column
    ``Enforcement`` says which; a shadow level's numbers are what enforcing would do.

    Args:
        limiter: The limiter to dump.
        top: How many flows of each ranking, per level (0 to 100).
        hash_distinguishers: Show each distinguisher as ``#`` and 12 hex digits of its
            BLAKE2b hash: ``True`` unkeyed (the same everywhere), or a key of up to 64 bytes
            (values as guessable as user names or addresses cannot be found by trying them).

    Raises:
        ValueError: If ``top`` or ``hash_distinguishers`` is invalid.
    """
    check_top(top, "top")
    key = hash_key(hash_distinguishers)
    run_due_before_read(limiter)
    levels = limiter.dump(waiting=False).levels  # the top flows need the counts only
    shadow = any(level.shadow for level in levels)
    rows: list[tuple[Cell, ...]] = []
    for level in levels:
        for flow in top_flows(level, top, key):
            row: tuple[Cell, ...] = (
                level.name,
                flow.flow_schema,
                flow.distinguisher,
                flow.seats_in_use,
                flow.waiting_requests,
                flow.rejections,
            )
            if shadow:
                row += ("Shadow" if level.shadow else "Enforce",)
            rows.append(row)
    columns = TOP_FLOW_COLUMNS + ((ENFORCEMENT_COLUMN,) if shadow else ())
    return Dump(columns, tuple(rows))
