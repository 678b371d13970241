"""The scripted traffic in multiprocess mode, scraped from the files: ``python -m`` this module.

Run in a process whose ``PROMETHEUS_MULTIPROC_DIR`` is set before ``prometheus_client`` is
imported (so its values live in that directory's files, as in a worker): the scenario of
``test_metrics.Traffic`` in fake time, refreshed halfway and at the end, then ``/metrics`` as
``metrics_app`` serves it in this mode, printed with this process's id spelled ``PID``.
``test_multiprocess.py`` compares it with the same traffic exported by one process.
"""

from __future__ import annotations

import asyncio
import glob
import os
import sys
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from apf_limiter.observability._multiprocess import refresh_all
from tests.observability.test_metrics import Traffic


async def _run() -> None:
    traffic = Traffic()
    await traffic.run_to_waiting()
    refresh_all()
    await traffic.run_to_end()
    refresh_all()


class _SortedFiles:
    """``MultiProcessCollector`` over the files in name order (a directory lists them in any)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Metric]:
        files = sorted(glob.glob(os.path.join(self.directory, "*.db")))
        merged: Iterable[Metric] = MultiProcessCollector.merge(files)  # type: ignore[no-untyped-call]
        return merged


def scrape(directory: str) -> str:
    """``/metrics`` of this process group, read from ``directory`` (the pid spelled ``PID``)."""
    registry = CollectorRegistry()
    registry.register(_SortedFiles(directory))
    text = generate_latest(registry).decode()
    return text.replace(f'pid="{os.getpid()}"', 'pid="PID"')


if __name__ == "__main__":
    asyncio.run(_run())
    sys.stdout.write(scrape(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
