"""Who is flooding: the top flows of each priority level, read from ``limiter.dump()``.

A flow is a (flow schema, distinguisher) pair. For each level, the flows holding the most seats
are counted at read time from the dump's executing and lingering requests (bounded by the
seats), those with the most waiting requests come from the counts the engine keeps as requests
join and leave queues when the dump was taken with ``waiting=False`` (the metrics' scrape), or
are counted from the waiting requests of a full dump; the flows rejected most over the last
minute come from the engine's bounded heavy-hitters sketch (``LevelDump.rejected_flows``).
Memory and time stay bounded whatever the number of flows.

Distinguishers are client-chosen and may be personal (user names, addresses, header values):
``hash_distinguishers`` shows each one as a short stable hash instead (:func:`hide`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from heapq import nsmallest
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apf_limiter.engine._dump import LevelDump, RequestDump

#: How many flows of each ranking are shown by default.
DEFAULT_TOP = 5
#: The most flows of each ranking any view shows (each ranking of a level has its own top).
MAX_TOP = 100
#: Hex digits of a hashed distinguisher (48 bits: collisions are unlikely among the few
#: flows any view shows).
HASH_DIGITS = 12

Flow = tuple[str, str]


@dataclass(frozen=True, slots=True)
class TopFlow:
    """One flow of a level, in the top of at least one ranking.

    Attributes:
        flow_schema: The flow schema.
        distinguisher: The distinguisher (hashed if asked; ``""`` at a level that does not
            hash flows: exempt, ``Reject`` and single-queue levels).
        seats_in_use: Seats its executing and lingering requests hold now.
        waiting_requests: Its requests waiting in queues now.
        rejections: Its rejections and ended waits over the last minute, at least: the
            count the engine's bounded sketch is sure of (exact while the level rejects fewer
            than 64 distinct flows in half a minute).
    """

    flow_schema: str
    distinguisher: str
    seats_in_use: int
    waiting_requests: int
    rejections: int


def check_top(top: int, name: str = "top_flows") -> int:
    """Check a top-N option: an int from 0 to :data:`MAX_TOP`.

    Raises:
        ValueError: If it is out of range.
    """
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP:
        raise ValueError(f"{name} must be an int from 0 to {MAX_TOP}, not {top!r}")
    return top


def hash_key(hash_distinguishers: bool | bytes) -> bytes | None:
    """The BLAKE2b key of a ``hash_distinguishers`` option; ``None`` when not hashing.

    ``True`` hashes without a key (the same hash everywhere); bytes are the key.

    Raises:
        ValueError: If a key is longer than 64 bytes (BLAKE2b's limit) or the option is
            neither a bool nor bytes.
    """
    if isinstance(hash_distinguishers, bool):
        return b"" if hash_distinguishers else None
    if isinstance(hash_distinguishers, bytes) and 0 < len(hash_distinguishers) <= 64:
        return hash_distinguishers
    raise ValueError(
        "hash_distinguishers must be True, False or a key of 1 to 64 bytes, "
        f"not {type(hash_distinguishers).__name__} of length "
        f"{len(hash_distinguishers) if isinstance(hash_distinguishers, bytes) else '?'}"
    )


def hide(distinguisher: str, key: bytes | None) -> str:
    """``distinguisher`` as ``#`` and 12 hex digits of its BLAKE2b hash under ``key``.

    ``None`` keeps it as it is; the empty distinguisher stays empty (nothing to hide).
    """
    if key is None or not distinguisher:
        return distinguisher
    digest = hashlib.blake2b(
        distinguisher.encode("utf-8", "surrogatepass"), digest_size=HASH_DIGITS // 2, key=key
    )
    return "#" + digest.hexdigest()


@dataclass(slots=True)
class LevelFlows:
    """The per-flow numbers of one level, counted from its dump.

    Attributes:
        seats: Seats in use by flow.
        waiting: Waiting requests by flow.
        rejections: Rejections over the last minute by flow (from the sketch).
    """

    seats: Counter[Flow]
    waiting: Counter[Flow]
    rejections: Counter[Flow]

    def ranked(self, measure: Counter[Flow], top: int) -> list[Flow]:
        """The ``top`` flows by ``measure`` (above 0), largest first, ties by name."""
        # A partial sort (O(flows x log top)), as sorted(...)[:top] would give: with thousands
        # of distinct flows waiting, sorting them all dominated a scrape.
        ranking = nsmallest(top, measure.items(), key=lambda item: (-item[1], item[0]))
        return [flow for flow, value in ranking if value > 0]


def level_flows(level: LevelDump) -> LevelFlows:
    """Count the seats in use and waiting requests of each flow of ``level``."""
    seats: Counter[Flow] = Counter()
    waiting: Counter[Flow] = Counter()
    if level.waiting_summary is not None:
        waiting.update(level.waiting_summary.flows)
    for queue in level.queues:
        for request in queue.waiting:  # a full dump (waiting=True)
            waiting[(request.flow_schema, request.distinguisher)] += 1
        _add_seats(seats, queue.executing)
    _add_seats(seats, level.queueless_executing)
    _add_seats(seats, level.lingering)  # seats still held for the additional latency
    rejections: Counter[Flow] = Counter()
    for flow in level.rejected_flows:
        # The count the sketch is sure of: its upper bound would show every one-off flow of
        # a flood of distinct distinguishers with the large count it inherited.
        rejections[(flow.flow_schema, flow.distinguisher)] = flow.rejections - flow.error
    return LevelFlows(seats, waiting, rejections)


def _add_seats(seats: Counter[Flow], requests: Iterable[RequestDump]) -> None:
    for request in requests:
        seats[(request.flow_schema, request.distinguisher)] += request.max_seats


def top_flows(level: LevelDump, top: int, key: bytes | None = None) -> list[TopFlow]:
    """The flows of ``level`` in the ``top`` of any ranking, with all three numbers.

    Sorted by seats in use, then waiting requests, then rejections (largest first), then by
    flow schema and distinguisher: at most ``3 × top`` flows.

    Args:
        level: The level's dump.
        top: How many flows of each ranking.
        key: The hash key of :func:`hash_key` (``None``: distinguishers as they are).
    """
    if top <= 0:
        return []
    counted = level_flows(level)
    chosen: set[Flow] = set()
    for measure in (counted.seats, counted.waiting, counted.rejections):
        chosen.update(counted.ranked(measure, top))
    rows = [
        TopFlow(
            flow[0],
            hide(flow[1], key),
            counted.seats[flow],
            counted.waiting[flow],
            counted.rejections[flow],
        )
        for flow in chosen
    ]
    rows.sort(
        key=lambda row: (
            -row.seats_in_use,
            -row.waiting_requests,
            -row.rejections,
            row.flow_schema,
            row.distinguisher,
        )
    )
    return rows
