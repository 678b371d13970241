"""Draw the performance plots of ``docs/performance.md`` from the benchmarks' JSON results.

Run: ``.venv/bin/python -m benchmarks.plots`` after :mod:`benchmarks.http_bench`,
:mod:`benchmarks.fairness_bench` and :mod:`benchmarks.saturation_bench` (a missing
``saturation.json`` is measured on the spot with a small grid). Writes, with matplotlib's Agg
backend:

* ``docs/perf-http-throughput.png`` — req/s of the variants (median, min–max bars);
* ``docs/perf-mice-latency.png`` — the mice's latency over time behind the semaphore and behind
  APF, over real HTTP and (wait only) in fake time;
* ``docs/perf-engine-cost.png`` — engine cost per request against queues and flows, and
  against the number of queued requests;
* ``docs/perf-overload.png`` — goodput against offered load, 1× to 10× the capacity, one line per
  contender, and the mice's p99 (:mod:`benchmarks.overload`);
* ``docs/perf-adaptive.png`` — the adaptive server limit, Gradient and AIMD side by side: the
  learned ServerCL and the execution time's p99 against time while the backend's capacity
  halves and recovers, simulated on the spot in fake time (:mod:`benchmarks.adaptive_sim`,
  deterministic; about a minute).

``--only NAME`` draws one of them (``http``, ``mice``, ``engine``, ``adaptive``, ``overload``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from benchmarks.servers import REPO_ROOT

__all__ = [
    "adaptive_limit",
    "engine_cost",
    "http_throughput",
    "main",
    "mice_latency",
    "overload_goodput",
]

RESULTS = REPO_ROOT / "benchmarks" / "results"
DOCS = REPO_ROOT / "docs"
_COLORS = {
    "bare": "#888888",
    "apf": "#1f77b4",
    "semaphore": "#d62728",
    "limit-concurrency": "#ff7f0e",
    "apf-retry": "#17becf",
    "apf-seats-22": "#9467bd",
}


#: The plots ``--only`` can name.
PLOTS: tuple[str, ...] = ("http", "mice", "engine", "adaptive", "overload")


def _save(fig: Figure, out: Path, title: str, *, dpi: int = 110, fontsize: int = 9) -> None:
    """Title the figure, lay it out, write it to ``out`` and free it."""
    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / name
    if not path.exists():
        return None
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def http_throughput(result: dict[str, Any], out: Path) -> None:
    """Bars: median req/s per variant, min–max whiskers, the ratio to bare on top."""
    names = list(result["variants"])
    stats = [result["variants"][n]["rps_stats"] for n in names]
    medians = [s["median"] for s in stats]
    below = [s["median"] - s["min"] for s in stats]
    above = [s["max"] - s["median"] for s in stats]
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(
        names,
        medians,
        yerr=[below, above],
        capsize=6,
        color=[_COLORS.get(n, "#444444") for n in names],
    )
    for bar, name in zip(bars, names, strict=True):
        ratio = result["variants"][name]["ratio_stats"]["median"]
        ax.annotate(
            f"{ratio:.1%}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height() / 2),
            ha="center",
            color="white",
            fontweight="bold",
        )
    build = result.get("server_build", {}).get("build", "?")
    ax.set_ylabel("requests / s (median, min–max)")
    ax.set_title(
        f"Hello world under uvicorn ({result['uvicorn_http']}, {result['uvicorn_loop']}): "
        f"{result['rounds']} rounds × {result['duration']:g} s, {result['generator']}, "
        f"{result['connections']} conns\napf_limiter {build}; % = median per-round ratio to bare",
        fontsize=9,
    )
    ax.set_ylim(0, max(s["max"] for s in stats) * 1.15)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def mice_latency(result: dict[str, Any], out: Path) -> None:
    """Mice latency over time, semaphore against APF: real HTTP (top), fake time (bottom)."""
    panels = []
    if "http" in result:
        panels.append(("http", result["http"]["mice_latency_series"]))
    panels.append(("fake", result["fake_time"]["mice_wait_series"]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.4 * len(panels)), squeeze=False)
    labels = {"semaphore": "FIFO semaphore", "fifo": "FIFO semaphore", "apf": "APF"}
    for ax, (kind, series) in zip(axes[:, 0], panels, strict=True):
        # The baseline first, so that both panels list and stack the variants alike.
        for variant, points in sorted(series.items(), key=lambda item: item[0] == "apf"):
            if not points:
                continue
            xs = [p[0] for p in points]
            ys = [p[1] * 1000 for p in points]
            color = _COLORS["apf"] if variant == "apf" else _COLORS["semaphore"]
            ax.scatter(xs, ys, s=6, alpha=0.6, color=color, label=labels.get(variant, variant))
        ax.set_yscale("log")
        ax.set_xlabel("seconds since the start")
        if kind == "http":
            h = result["http"]
            load = h["load"]
            ax.set_ylabel("mouse latency (ms)")
            ax.set_title(
                f"Real HTTP: 1 elephant ({load['elephant_concurrency']} in flight) vs "
                f"{load['mice']} mice, {h['capacity']} seats, ~"
                f"{load['service_time'] * 1000:.0f} ms service",
                fontsize=9,
            )
        else:
            ax.set_ylabel("mouse wait for a seat (ms)")
            ax.set_title("Fake time (exact), same load: the wait for a seat", fontsize=9)
        # Outside the axes: the points fill the whole plot area.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, markerscale=2)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def engine_cost(result: dict[str, Any], out: Path) -> None:
    """Cost per request against queues (one line per flow count) and against the backlog."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for flows, row in result["by_flows"].items():
        left.plot(
            row["queues"], [s * 1e6 for s in row["seconds"]], marker="o", label=f"{flows} flows"
        )
    left.set_xscale("log", base=2)
    left.set_xlabel("queues of the level")
    left.set_ylabel("µs per request (enqueue + dispatch)")
    left.set_title("Saturated level, 2,000 queued", fontsize=9)
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    left.grid(True, alpha=0.3)
    for queues, row in result["by_backlog"].items():
        right.plot(
            row["backlog"], [s * 1e6 for s in row["seconds"]], marker="o", label=f"{queues} queues"
        )
    right.set_xscale("log")
    right.set_xlabel("requests queued")
    right.set_ylabel("µs per request")
    right.set_title("Against the backlog (10,000 flows)", fontsize=9)
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    right.grid(True, alpha=0.3)
    build = result.get("build", {}).get("build", "?")
    _save(fig, out, f"Engine cost under saturation (apf_limiter {build})", fontsize=10)


def _plain_log(ax: Axes, ticks: tuple[float, ...]) -> None:
    """A log axis with ``ticks`` written as plain numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def adaptive_limit(out: Path, capacity: int = 20) -> None:
    """Learned ServerCL (top) and execution time's p99 (bottom) against time, per algorithm.

    The scenario of criterion (c) of :mod:`benchmarks.adaptive_bench`, started far above the
    knee (10 × C) so that one run shows both finding it and following it: the backend's
    capacity C halves at 120 s and recovers at 200 s. A static ServerCL of C (the best static
    limit of criterion (b), before the change) is the reference.
    """
    from benchmarks.adaptive_bench import ALGORITHMS, LOAD, change_steps
    from benchmarks.adaptive_sim import Run, simulate

    steps = change_steps(capacity)
    duration = 320.0
    static = simulate(Run(steps, LOAD, duration, capacity))
    fig, axes = plt.subplots(
        2, len(ALGORITHMS), figsize=(10, 6), sharex=True, sharey="row", squeeze=False
    )
    for column, algorithm in enumerate(ALGORITHMS):
        adaptive = {"algorithm": algorithm, "minLimit": 1, "maxLimit": 1000}
        result = simulate(Run(steps, LOAD, duration, 10 * capacity, adaptive))
        top, bottom = axes[0, column], axes[1, column]
        # C and the band [0.8 C, 1.5 C] criteria (a) and (c) accept, as steps over time.
        edges = [at for at, _ in steps] + [duration]
        for (at, knee), end in zip(steps, edges[1:], strict=True):
            top.fill_between([at, end], 0.8 * knee, 1.5 * knee, color="#2ca02c", alpha=0.15, lw=0)
            top.plot([at, end], [knee, knee], color="#2ca02c", lw=1.2)
        top.plot([], [], color="#2ca02c", lw=1.2, label="capacity C (band 0.8–1.5 C)")
        top.step(
            [t for t, _ in result.limits],
            [limit for _, limit in result.limits],
            where="post",
            color=_COLORS["apf"],
            lw=1.2,
            label=f"learned ServerCL ({algorithm})",
        )
        _plain_log(top, (5, 10, 20, 50, 100, 200))
        top.set_title(f"{algorithm}: from ServerCL {10 * capacity}", fontsize=9)
        top.grid(True, which="both", alpha=0.3)
        top.legend(fontsize=8, loc="upper right")
        for label, run, color in (
            (f"static ServerCL {capacity}", static, _COLORS["bare"]),
            (algorithm, result, _COLORS["apf"]),
        ):
            series = run.p99_series(execution=True)
            bottom.plot(
                [t for t, _ in series],
                [p * 1000 for _, p in series],
                color=color,
                lw=1,
                label=label,
            )
        _plain_log(bottom, (200, 300, 500, 1000, 2000))
        bottom.set_xlabel("seconds (fake time)")
        bottom.grid(True, which="both", alpha=0.3)
        bottom.legend(fontsize=8, loc="upper right")
    axes[0, 0].set_ylabel("ServerCL (seats)")
    axes[1, 0].set_ylabel("execution time, p99 per second (ms)")
    title = (
        f"Adaptive server limit, fake time: processor-sharing backend, knee C = {capacity} "
        f"halving at 120 s and back at 200 s, {LOAD:g} × load, two levels (50 ms, 200 ms)"
    )
    _save(fig, out, title, dpi=100)


def overload_goodput(result: dict[str, Any], out: Path) -> None:
    """Goodput (left) and the mice's p99 (right) against offered load, one line per contender.

    The median over the rounds of :mod:`benchmarks.overload`'s runs; a mouse not answered in
    time counts as the clients' timeout, so a line at the timeout means the mice starved.
    """
    by_contender: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for run in result["runs"]:
        by_contender.setdefault(run["contender"], {}).setdefault(run["multiple"], []).append(run)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, runs in by_contender.items():
        multiples = sorted(runs)
        style = {"color": _COLORS.get(name, "#444444"), "marker": "o", "label": name}
        if name == "apf-retry":
            style["linestyle"] = "--"
        goodput = [median(r["goodput"] for r in runs[m]) for m in multiples]
        mice = [median(r["mice_p99"] for r in runs[m]) * 1000 for m in multiples]
        left.plot(multiples, goodput, **style)
        right.plot(multiples, mice, **style)
    left.axhline(0.95, color="#2ca02c", lw=1, ls=":", label="target 0.95")
    left.set_ylim(-0.03, 1.1)
    left.set_ylabel("goodput (answers within the timeout / capacity)")
    _plain_log(right, (50, 100, 200, 500, 1000, 2000))
    right.set_ylabel("mice p99 (ms; not answered = the timeout)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(sorted({r["multiple"] for r in result["runs"]})))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("offered load (× capacity)")
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8, loc="lower left")
    build = result.get("build", {}).get("build", "?")
    title = (
        f"Open-loop overload: a pool of {result['pool']} held {result['hold_ms']} ms "
        f"({result['capacity_rps']:g} req/s), clients give up after {result['timeout']:g} s; "
        f"{result['rounds']} round(s) × {result['duration']:g} s per point, apf_limiter {build}"
    )
    _save(fig, out, title)


def main(argv: list[str] | None = None) -> None:
    """Draw every plot whose results exist (or the one ``--only`` names)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=Path, default=DOCS, help="where the PNGs go")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON files are")
    parser.add_argument("--only", choices=PLOTS, help="draw this plot only")
    args = parser.parse_args(argv)
    chosen = PLOTS if args.only is None else (args.only,)
    # Plot -> (result file, the function drawing it, its PNG, the benchmark writing the file).
    from_results = {
        "http": ("http.json", http_throughput, "perf-http-throughput.png", "http_bench"),
        "mice": ("fairness.json", mice_latency, "perf-mice-latency.png", "fairness_bench"),
        "overload": ("overload.json", overload_goodput, "perf-overload.png", "overload"),
    }
    for name, (file, draw, png, benchmark) in from_results.items():
        if name not in chosen:
            continue
        result = _load(args.results, file)
        if result is not None:
            draw(result, args.docs / png)
            print(f"wrote {args.docs / png}")
        else:
            print(f"no benchmarks/results/{file}: run python -m benchmarks.{benchmark}")
    if "engine" in chosen:
        saturation = _load(args.results, "saturation.json")
        if saturation is None:
            from benchmarks.saturation_bench import sweep

            print("no benchmarks/results/saturation.json: measuring a small grid")
            saturation = sweep(n=5000, repeats=1, backlogs=(1000, 10_000), memory_counts=())
        engine_cost(saturation, args.docs / "perf-engine-cost.png")
        print(f"wrote {args.docs / 'perf-engine-cost.png'}")
    if "adaptive" in chosen:
        adaptive_limit(args.docs / "perf-adaptive.png")
        print(f"wrote {args.docs / 'perf-adaptive.png'}")


if __name__ == "__main__":
    main()
