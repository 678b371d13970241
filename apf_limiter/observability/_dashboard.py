"""The live dashboard: a JSON feed of every priority level and the page that renders it.

The page (``DASHBOARD_HTML`` of ``_dashboard_page``) is one small dependency-free HTML document
whose script polls the feed (the same URL with ``?format=json``) every second and redraws a
table: per level its nominal, lower, upper and current limits, seats in use against the current
limit, executing and waiting requests, the distribution of queue lengths, and rejections by
reason; beneath each level, its top flows (who is flooding). When any level is in shadow
mode, a banner names those levels and says that nothing is held or rejected there; their rows
are marked ``Shadow`` and their numbers read as what enforcing would do ("would wait", "would
reject"). With the adaptive server limit on, a panel shows the learned and applied limits,
the latency ratio and the baselines, and over the page's last polls the learned and applied
limits and the latency ratio (against 1.0, latency at its baseline).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from apf_limiter.observability._due import run_due_before_read
from apf_limiter.observability._top_flows import (
    DEFAULT_TOP,
    check_top,
    hash_key,
)
from apf_limiter.observability._top_flows import top_flows as flows_of

if TYPE_CHECKING:
    from apf_limiter.engine._dump import LevelDump
    from apf_limiter.engine._statistics import AdaptiveStatistics
    from apf_limiter.limiter import Limiter


def dashboard_feed(
    limiter: Limiter, *, top_flows: int = DEFAULT_TOP, hash_distinguishers: bool | bytes = False
) -> dict[str, Any]:
    """Return the dashboard's JSON document: a snapshot of every priority level.

    Levels come in configuration order (quiescing ones last). Each level carries its limits
    (``nominal_limit``, ``lower_limit``, ``upper_limit``, ``current_limit``), seats and requests
    executing and waiting, ``dispatched``, ``rejected`` by reason (``queue-full``,
    ``concurrency-limit``, ``time-out``), ``cancelled``, and ``queue_lengths``: how many queues
    hold how many waiting requests (see :func:`queue_length_buckets`). ``shadow`` says whether
    the level is in shadow mode: then nothing waits or is rejected there, and these numbers
    describe the requests' virtual twins, i.e. what enforcing would do. ``shadow_levels``
    names the levels in shadow mode. ``top_flows`` lists who is flooding the level: the flows
    (``flow_schema``, ``distinguisher``) among its ``top_flows`` by seats in use, by waiting
    requests or by rejections over the last minute, each with ``seats_in_use``,
    ``waiting_requests`` and ``rejections`` (see :func:`dump_top_flows`). ``adaptive`` is
    ``None`` unless ``adaptiveConcurrency`` is on; then it carries
    :attr:`~apf_limiter.Limiter.adaptive_concurrency`: ``algorithm``, the learned ``limit``
    (unrounded), the ``applied_limit`` in force as ServerCL, ``min_limit`` and ``max_limit``,
    ``baselines`` per level (seconds), ``last_ratio``, ``last_latency`` (seconds),
    ``updates``, ``probes`` (run so far) and ``probing`` (whether one holds the limit low now).

    Args:
        limiter: The limiter to show.
        top_flows: How many flows of each ranking per level (0 to 100; 0 for none).
        hash_distinguishers: Show distinguishers as short stable hashes (``True``, or a key
            of up to 64 bytes).

    Raises:
        ValueError: If ``top_flows`` or ``hash_distinguishers`` is invalid.
    """
    top = check_top(top_flows)
    key = hash_key(hash_distinguishers)
    run_due_before_read(limiter)  # a file changed on a quiet server shows at once
    # Counts only, not the waiting requests themselves: a poll costs the same with 3,000
    # requests queued as with none (top flows come from the engine's waiting tally).
    dump = limiter.dump(waiting=False)
    stats = dump.statistics
    levels: list[dict[str, Any]] = []
    for state in dump.levels:
        level = state.statistics
        lengths = [queue.waiting_requests for queue in state.queues]
        levels.append(
            {
                "name": state.name,
                "shadow": state.shadow,
                "type": level.type,
                "limit_response": level.limit_response,
                "quiescing": level.quiescing,
                "nominal_limit": level.nominal_limit,
                "lendable_limit": level.lendable_limit,
                "borrowing_limit": level.borrowing_limit,
                "lower_limit": level.lower_limit,
                "upper_limit": level.upper_limit,
                "current_limit": level.current_limit,
                "target_limit": level.target_limit,
                "executing_requests": level.executing_requests,
                "executing_seats": level.executing_seats,
                "waiting_requests": level.waiting_requests,
                "waiting_seats": level.waiting_seats,
                "dispatched": level.dispatched,
                "rejected": dict(level.rejected),
                "cancelled": level.cancelled,
                "queues": level.queues,
                "queue_length_limit": _queue_length_limit(state),
                "active_queues": sum(1 for length in lengths if length),
                "longest_queue": max(lengths, default=0),
                "queue_lengths": queue_length_buckets(lengths),
                "demand_smoothed": level.demand_smoothed,
                "top_flows": [asdict(flow) for flow in flows_of(state, top, key)],
            }
        )
    return {
        "time": limiter.clock.now(),
        "server_concurrency_limit": stats.server_concurrency_limit,
        "nominal_limit_sum": stats.nominal_limit_sum,
        "fair_fraction": stats.fair_fraction,
        "borrowing_regime": stats.borrowing_regime,
        "executing_seats": stats.executing_seats,
        "executing_requests": stats.executing_requests,
        "waiting_requests": stats.waiting_requests,
        "shadow_levels": [level["name"] for level in levels if level["shadow"]],
        "adaptive": _adaptive(limiter.adaptive_concurrency),
        "priority_levels": levels,
    }


def _adaptive(adaptive: AdaptiveStatistics | None) -> dict[str, Any] | None:
    if adaptive is None:
        return None
    return {
        "algorithm": adaptive.algorithm,
        "limit": adaptive.limit,
        "applied_limit": adaptive.applied_limit,
        "min_limit": adaptive.min_limit,
        "max_limit": adaptive.max_limit,
        "baselines": dict(adaptive.baselines),
        "last_ratio": adaptive.last_ratio,
        "last_latency": adaptive.last_latency,
        "updates": adaptive.updates,
        "probes": adaptive.probes,
        "probing": adaptive.probing,
    }


def _queue_length_limit(level: LevelDump) -> int:
    return level.queue_length_limit if level.desired_num_queues > 0 else 0


def queue_length_buckets(lengths: list[int]) -> list[dict[str, Any]]:
    """Count queues by length, in buckets ``0``, ``1``, ``2-3``, ``4-7``, ... (powers of two).

    Buckets run up to the one holding the longest queue; a level without queues has none.

    Returns:
        One ``{"label": str, "low": int, "high": int, "queues": int}`` per bucket.
    """
    if not lengths:
        return []
    longest = max(lengths)
    bounds = [(0, 0), (1, 1)]
    low = 2
    while low <= longest:
        bounds.append((low, 2 * low - 1))
        low *= 2
    counts = [0] * len(bounds)
    for length in lengths:
        counts[0 if length == 0 else length.bit_length()] += 1
    return [
        {"label": str(lo) if lo == hi else f"{lo}-{hi}", "low": lo, "high": hi, "queues": count}
        for (lo, hi), count in zip(bounds, counts, strict=True)
    ]
