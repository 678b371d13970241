"""Bring a limiter up to date before a read: its due work first (``Limiter.run_due``).

A quiet limiter runs its periodic work on the next call, or on its timer: a dashboard, a dump
or a scrape read between the two would show the old state (the mode of a configuration file
changed seconds ago). So each read runs the due work first, from the limiter's own thread: an
event loop's, or the main thread without one. A scrape served by ``prometheus_client``'s own
HTTP thread only reads: the limiter is not thread-safe, and that thread's read is stale by at
most the timer's interval.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from apf_limiter._clock import current_loop

if TYPE_CHECKING:
    from apf_limiter.limiter import Limiter


def run_due_before_read(limiter: Limiter) -> None:
    """Run ``limiter``'s due work, unless called from a thread that is not its own."""
    if current_loop() is not None or threading.current_thread() is threading.main_thread():
        limiter.run_due()
