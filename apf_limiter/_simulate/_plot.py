"""PNG plots of a simulation report (the optional ``plot`` extra: matplotlib)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def plot_reports(reports: Sequence[Mapping[str, Any]], path: str) -> None:
    """Draw each report's seat limits over time and its waits per level into one PNG.

    Raises:
        ImportError: If matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(reports), 2, figsize=(12, 4 * len(reports)), squeeze=False)
    for row, report in zip(axes, reports, strict=True):
        limits, waits = row
        samples = report["borrowing"]
        names = [name for name in (samples[0]["levels"] if samples else {}) if name != "exempt"]
        times = [sample["at"] for sample in samples]
        for name in names:
            limits.step(
                times,
                [sample["levels"].get(name, {}).get("limit", 0) for sample in samples],
                where="post",
                label=name,
            )
        limits.set_title(f"Seat limits over time: {report['config']}")
        limits.set_xlabel("seconds")
        limits.set_ylabel("seats")
        limits.legend(fontsize="small")
        levels = report["priority_levels"]
        labels = list(levels)
        positions = range(len(labels))
        waits.bar(
            [p - 0.2 for p in positions],
            [levels[n]["wait_p50"] * 1000 for n in labels],
            width=0.4,
            label="p50",
        )
        waits.bar(
            [p + 0.2 for p in positions],
            [levels[n]["wait_p99"] * 1000 for n in labels],
            width=0.4,
            label="p99",
        )
        waits.set_xticks(list(positions), labels, fontsize="small")
        waits.set_title("Queue wait per priority level")
        waits.set_ylabel("ms")
        waits.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
