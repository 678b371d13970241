"""What a simulation found, per priority level, flow schema and flow: a dict, and text tables."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apf_limiter._simulate._run import RunResult, Tally
from apf_limiter.observability._tabwriter import tabwrite

#: How many engine flows the report lists, heaviest first.
HEAVIEST: int = 10
#: At most this many rows of borrowing samples in the text report (the JSON has them all).
TEXT_SAMPLES: int = 12


def _percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    rank = max(1, -(-int(fraction * 1000) * len(values) // 1000))
    return values[min(rank, len(values)) - 1]


def _summary(tallies: Iterable[Tally], ordered_waits: Mapping[int, array[float]]) -> dict[str, Any]:
    waits: array[float] = array("d")
    served = 0
    rejected: dict[str, int] = {}
    retry_after: dict[str, dict[int, int]] = {}
    runs = 0
    for tally in tallies:
        served += tally.served
        if tally.waits:
            waits.extend(ordered_waits[id(tally)])
            runs += 1
        for reason, count in tally.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + count
        for (reason, seconds), count in tally.retry_after.items():
            values = retry_after.setdefault(reason, {})
            values[seconds] = values.get(seconds, 0) + count
    # Each tally's waits are sorted already: one run needs nothing more, and the sort of
    # several only merges them (it finds the runs).
    ordered: Sequence[float] = waits if runs <= 1 else sorted(waits)
    return {
        "requests": served + sum(rejected.values()),
        "served": served,
        "wait_p50": _percentile(ordered, 0.5),
        "wait_p99": _percentile(ordered, 0.99),
        "wait_max": ordered[-1] if ordered else 0.0,
        "rejected": dict(sorted(rejected.items())),
        "retry_after": {
            reason: {str(k): v for k, v in sorted(values.items())}
            for reason, values in sorted(retry_after.items())
        },
    }


def build_report(result: RunResult, *, config: str, traffic: str) -> dict[str, Any]:
    """The report of one run, as plain data (what ``--json`` prints)."""
    by_level: dict[str, list[Tally]] = {}
    by_schema: dict[str, list[Tally]] = {}
    by_flow: dict[str, list[Tally]] = {}
    schema_level: dict[str, str] = {}
    for (flow, schema, level), tally in result.tallies.items():
        by_level.setdefault(level, []).append(tally)
        by_schema.setdefault(schema, []).append(tally)
        by_flow.setdefault(flow, []).append(tally)
        schema_level[schema] = level
    heavy = sorted(
        result.flows.items(), key=lambda item: (-(item[1].served + item[1].rejected), item[0])
    )[:HEAVIEST]
    statistics = result.statistics
    # Every tally's waits sorted once, for the three summaries it is part of.
    ordered = {id(t): array("d", sorted(t.waits)) for t in result.tallies.values() if t.waits}
    return {
        "config": config,
        "traffic": traffic,
        "server_concurrency_limit": statistics.server_concurrency_limit,
        "simulated_seconds": result.end,
        "events": result.events,
        "requests": sum(t.served + sum(t.rejected.values()) for t in result.tallies.values()),
        "priority_levels": {name: _summary(t, ordered) for name, t in sorted(by_level.items())},
        "flow_schemas": {
            name: {"priority_level": schema_level[name], **_summary(t, ordered)}
            for name, t in sorted(by_schema.items())
        },
        "flows": {name: _summary(t, ordered) for name, t in sorted(by_flow.items())},
        "heaviest_flows": [
            {
                "flow_schema": schema,
                "distinguisher": distinguisher,
                "requests": flow.served + flow.rejected,
                "served": flow.served,
                "rejected": flow.rejected,
                "wait_mean": flow.wait_sum / flow.served if flow.served else 0.0,
            }
            for (schema, distinguisher), flow in heavy
        ],
        "borrowing": [
            {
                "at": sample.at,
                "levels": {
                    name: {"limit": limit, "executing_seats": executing, "waiting_seats": waiting}
                    for name, (limit, executing, waiting) in sample.levels.items()
                },
            }
            for sample in result.samples
        ],
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms"


def _rejections(summary: Mapping[str, Any]) -> str:
    parts = []
    for reason, count in summary["rejected"].items():
        values = [int(v) for v in summary["retry_after"].get(reason, {})]
        after = f" (Retry-After {min(values)}-{max(values)}s)" if values else ""
        if values and min(values) == max(values):
            after = f" (Retry-After {values[0]}s)"
        parts.append(f"{count} {reason}{after}")
    return ", ".join(parts) or "-"


def _table(title: str, rows: Mapping[str, Mapping[str, Any]], extra: str | None = None) -> str:
    head = "NAME\t" + (f"{extra.upper().replace('_', ' ')}\t" if extra else "")
    lines = [head + "REQUESTS\tSERVED\tWAIT P50\tWAIT P99\tREJECTED"]
    for name, summary in rows.items():
        lead = f"{name}\t" + (f"{summary[extra]}\t" if extra else "")
        lines.append(
            f"{lead}{summary['requests']}\t{summary['served']}\t{_ms(summary['wait_p50'])}\t"
            f"{_ms(summary['wait_p99'])}\t{_rejections(summary)}"
        )
    return f"{title}:\n" + tabwrite("\n".join(lines) + "\n", minwidth=0, padding=2)


def render_text(report: Mapping[str, Any]) -> str:
    """The report as text tables."""
    out = [
        f"Configuration: {report['config']}   traffic: {report['traffic']}",
        f"{report['requests']} requests, simulated {report['simulated_seconds']:.1f}s "
        f"({report['events']} events); server concurrency limit "
        f"{report['server_concurrency_limit']}",
        "",
        _table("Priority levels", report["priority_levels"]),
        _table("Flow schemas", report["flow_schemas"], "priority_level"),
        _table("Traffic flows", report["flows"]),
    ]
    lines = ["FLOW SCHEMA\tDISTINGUISHER\tREQUESTS\tSERVED\tREJECTED\tMEAN WAIT"]
    for flow in report["heaviest_flows"]:
        lines.append(
            f"{flow['flow_schema']}\t{flow['distinguisher'] or '-'}\t{flow['requests']}\t"
            f"{flow['served']}\t{flow['rejected']}\t{_ms(flow['wait_mean'])}"
        )
    out.append("Heaviest flows:\n" + tabwrite("\n".join(lines) + "\n", minwidth=0, padding=2))
    out.append(_borrowing(report["borrowing"]))
    return "\n".join(out)


def _borrowing(samples: list[Mapping[str, Any]]) -> str:
    if not samples:
        return ""
    step = max(1, -(-len(samples) // TEXT_SAMPLES))
    names = [name for name in samples[0]["levels"] if name != "exempt"]
    lines = ["AT\t" + "\t".join(names)]
    for sample in samples[::step]:
        cells = []
        for name in names:
            level = sample["levels"].get(name)
            cells.append(
                "-"
                if level is None
                else f"{level['limit']} ({level['executing_seats']}+{level['waiting_seats']})"
            )
        lines.append(f"{sample['at']:.0f}s\t" + "\t".join(cells))
    return "Borrowing over time (seat limit, and seats executing+waiting, per level):\n" + tabwrite(
        "\n".join(lines) + "\n", minwidth=0, padding=2
    )


def render_comparison(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Two reports of the same traffic side by side: A is the first configuration, B the other."""
    out = [f"A: {a['config']}", f"B: {b['config']}", f"Traffic: {a['traffic']}", ""]
    for title, key in (
        ("Priority levels", "priority_levels"),
        ("Flow schemas", "flow_schemas"),
        ("Traffic flows", "flows"),
    ):
        lines = ["NAME\tSERVED A\tSERVED B\tP99 A\tP99 B\tREJECTED A\tREJECTED B"]
        for name in sorted(set(a[key]) | set(b[key])):
            x, y = a[key].get(name), b[key].get(name)
            lines.append(
                f"{name}\t{x['served'] if x else '-'}\t{y['served'] if y else '-'}\t"
                f"{_ms(x['wait_p99']) if x else '-'}\t{_ms(y['wait_p99']) if y else '-'}\t"
                f"{_rejections(x) if x else '-'}\t{_rejections(y) if y else '-'}"
            )
        out.append(f"{title}:\n" + tabwrite("\n".join(lines) + "\n", minwidth=0, padding=2))
    return "\n".join(out)
