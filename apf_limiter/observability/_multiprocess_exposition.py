"""``/metrics`` in multiprocess mode: the whole process group, read from its directory.

``metrics_app`` serves :class:`MultiprocessExposition` when ``PROMETHEUS_MULTIPROC_DIR`` is set.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from apf_limiter.observability._multiprocess import refresh_all

if TYPE_CHECKING:
    from apf_limiter.observability._asgi import Receive, Scope, Send

_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def mark_dead_workers(directory: str) -> list[int]:
    """Mark the workers whose live-gauge files are in ``directory`` but whose process is gone.

    ``prometheus_client.multiprocess.mark_process_dead`` removes their ``live*`` gauge files,
    so that the ``livesum``/``liveall`` gauges forget them; their counters stay (summed).

    Returns:
        The process ids marked dead.
    """
    from prometheus_client import multiprocess

    pids = set()
    for file_name in os.listdir(directory):
        match = _LIVE_GAUGE_FILE.fullmatch(file_name)
        if match:
            pids.add(int(match.group(1)))
    dead = sorted(pid for pid in pids if pid != os.getpid() and not _alive(pid))
    for pid in dead:
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
    return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # e.g. another user's process: it exists
    return True


class MultiprocessExposition:
    """An ASGI app serving the metrics of the whole process group, from ``directory``.

    Args:
        directory: ``PROMETHEUS_MULTIPROC_DIR``.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one scrape: this worker's gauges refreshed, dead workers marked, all summed."""
        from prometheus_client import CollectorRegistry, make_asgi_app
        from prometheus_client.multiprocess import MultiProcessCollector

        refresh_all()
        mark_dead_workers(self.directory)
        # A registry per scrape, as prometheus_client recommends for multiprocess mode.
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        await make_asgi_app(registry)(scope, receive, send)
