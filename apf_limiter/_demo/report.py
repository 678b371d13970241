"""The demo's output: the live progress line and the side-by-side table.

The closing sentences are :mod:`apf_limiter._demo.verdict`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from apf_limiter._demo.load import ELEPHANT, ClientResult

RUN_TITLES = {"semaphore": "semaphore (today)", "apf": "APF (apf_limiter)"}


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``nan`` when there are none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def all_mice(results: Mapping[str, ClientResult]) -> ClientResult:
    """The mice's results merged into one (``all mice``)."""
    merged = ClientResult("all mice", "mouse")
    for result in results.values():
        if result.kind == "mouse":
            merged.latencies.extend(result.latencies)
            merged.rejected += result.rejected
            merged.retry_after += result.retry_after
            merged.failed += result.failed
    return merged


def mice_p99(results: Mapping[str, ClientResult]) -> float:
    """The 99th percentile latency of all the mice's served requests, in seconds."""
    return percentile(all_mice(results).latencies, 0.99)


def ms(seconds: float) -> str:
    """Seconds as whole milliseconds (``-`` for ``nan``)."""
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.0f} ms"


def progress_line(
    run: str, elapsed: float, duration: float, results: Mapping[str, ClientResult]
) -> str:
    """One line of live progress: the run, time, and what the clients got so far."""
    width = 20
    filled = min(width, int(width * elapsed / duration)) if duration > 0 else width
    bar = "#" * filled + "." * (width - filled)
    elephant = results[ELEPHANT]
    mice = all_mice(results)
    return (
        f"{RUN_TITLES.get(run, run):<18} [{bar}] {elapsed:4.1f}/{duration:.1f} s  "
        f"elephant {elephant.served} served, {elephant.rejected} x 429  |  "
        f"mice {mice.served} served, p99 {ms(percentile(mice.latencies, 0.99))}"
    )


def _cells(result: ClientResult | None) -> list[str]:
    if result is None:
        return ["", "", "", ""]
    return [
        str(result.served),
        str(result.rejected),
        ms(percentile(result.latencies, 0.50)),
        ms(percentile(result.latencies, 0.99)),
    ]


#: Under the table: what its latency columns measure, and how the elephant treats a 429.
TABLE_NOTES: tuple[str, ...] = (
    "p50/p99: latency of the served (200) responses only; the 429s are counted, not timed.",
    "The elephant ignores Retry-After: it retries each 429 after 0.2 s, whatever it says.",
)


def render_table(runs: Mapping[str, Mapping[str, ClientResult]]) -> str:
    """The side-by-side table: per client and run, served, 429s, p50 and p99 latency.

    The table ends with :data:`TABLE_NOTES`: p50 and p99 time the served requests only, and
    the elephant does not wait the ``Retry-After`` of its 429s.
    """
    names = list(runs)
    clients: list[str] = []
    for results in runs.values():
        clients += [name for name in results if name not in clients]
    header_cells = ["served", "429s", "p50", "p99"]
    widths = [7, 6, 9, 9]
    rows: list[list[str]] = []
    for client in [*clients, "all mice"]:
        row = [client]
        for run in names:
            results = runs[run]
            result = all_mice(results) if client == "all mice" else results.get(client)
            row += _cells(result)
        rows.append(row)
    name_width = max(10, *(len(row[0]) for row in rows))
    block = sum(widths) + 2
    lines = [
        " " * name_width + "".join(f" | {RUN_TITLES.get(run, run):<{block - 3}}" for run in names),
        f"{'client':<{name_width}}"
        + "".join(
            " |" + "".join(f"{cell:>{w}}" for cell, w in zip(header_cells, widths, strict=True))
            for _ in names
        ),
    ]
    lines.append("-" * len(lines[1]))
    for row in rows:
        if row[0] == "all mice":
            lines.append("-" * len(lines[1]))
        line = f"{row[0]:<{name_width}}"
        for index in range(len(names)):
            cells = row[1 + 4 * index : 5 + 4 * index]
            line += " |" + "".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
        lines.append(line)
    lines += TABLE_NOTES
    return "\n".join(line.rstrip() for line in lines) + "\n"
