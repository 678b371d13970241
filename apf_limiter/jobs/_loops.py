"""One event loop at a time per limiter: a clear error for a job guarded from another thread.

A :class:`~apf_limiter.Limiter` belongs to the event loop that uses it: its waiters are futures
of that loop and its engine has no lock. Guarded from a second thread's loop while the first
still runs, a job would go unnoticed: the other thread's release wakes its future from the
wrong thread (the loop sleeps on until its next timer, the wait limit, with the seats held
and idle), and the two threads change the engine's queues at once. :func:`claim_loop` refuses
that with a :class:`RuntimeError` before anything is admitted. A limiter may still move from a
loop that has stopped to a new one (``asyncio.run`` after ``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Final

from apf_limiter.limiter import Limiter

# The loop each limiter (by id) was last guarded from, and, per loop, the limiters it claimed:
# holding them there keeps a claimed limiter alive (so its id is not reused) while its loop is.
_owners: dict[int, weakref.ref[asyncio.AbstractEventLoop]] = {}
_claimed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Limiter]] = (
    weakref.WeakKeyDictionary()
)
_lock: Final = threading.Lock()
_PRUNE_AT: Final = 64  # owners kept before the dead ones (loops gone) are dropped


def claim_loop(limiter: Limiter) -> None:
    """Claim ``limiter`` for the running asyncio loop, unless another thread's loop uses it.

    Under trio (or with no loop running) nothing is checked: the limiter itself says so when
    a job must wait without a loop.

    Raises:
        RuntimeError: If the limiter was last used from an event loop that is still running,
            in another thread. Nothing was admitted.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    key = id(limiter)
    owner = _owners.get(key)
    if owner is not None and owner() is loop:
        return  # the common case: the same loop as last time
    with _lock:
        owner = _owners.get(key)
        other = None if owner is None else owner()
        held = None if other is None else _claimed.get(other)
        if other is not None and other is not loop and held is not None:
            if held.get(key) is limiter and other.is_running() and not other.is_closed():
                raise RuntimeError(
                    "this Limiter is in use by an event loop running in another thread: a "
                    "Limiter serves one event loop at a time. Guard the job in that loop "
                    "(asyncio.run_coroutine_threadsafe) or give each thread its own Limiter"
                )
            held.pop(key, None)  # that loop stopped: the limiter moves on
        if len(_owners) >= _PRUNE_AT:
            for stale in [k for k, ref in _owners.items() if ref() is None]:
                del _owners[stale]
        _owners[key] = weakref.ref(loop)
        _claimed.setdefault(loop, {})[key] = limiter
