"""Reloading a configuration file when it changes (``Limiter.from_file(..., reload=True)``).

The request path never reads or parses the file. When a check falls due, the :class:`Reloader`
(a job of the shell's scheduler) starts it, from whichever call came (an admission, a release),
on a worker thread, at most one at a time, and returns; a later call collects what the check
found and applies it, which is the engine's swap only (the configuration arrives parsed,
validated and with its classifier built).

A check stats the file first. It reads the file only when the stat (device, inode, size,
modification and change times in nanoseconds) differs from the one whose content was read last,
and only once that new stat has stayed the same for one check (a new file, renamed over the old
one) or two (the same file written in place, whose writer may pause for longer than an
interval): a file caught while being written (truncated, then written again) is not read before
the writer is done, and an unchanged file, however big, is never read again. A read counts only
if the stat after it agrees with the stat before. Only a regular file of at most ``max_size``
bytes is read (``config/_text.py``, ``read_file_bytes``): a named pipe, a device or a directory
is refused without blocking. The worker also builds the new configuration's classifier
(``Controller.prepare``), so that applying it on the limiter's thread is the engine's atomic
swap alone. Content that is the same as the running configuration's (a ``touch``) is not
applied again; content refused once is not reported again until it changes.

The stat is trusted because the kernel sets the change time (``st_ctime``) on every write and
nobody can set it back (``cp -p`` and ``os.utime`` set the modification time, and move the
change time): a write after a read falls at least one check interval after the previous change,
so it moves the change time unless the file system's timestamps are coarser than the interval.
"""

from __future__ import annotations

import logging
import os
import threading
from _thread import start_new_thread
from collections.abc import Callable

from apf_limiter.config._model import Configuration
from apf_limiter.engine._classifier import Classifier
from apf_limiter.limiter._config_file import ConfigFile, Outcome
from apf_limiter.limiter._scheduler import NEVER, Scheduler

logger = logging.getLogger("apf_limiter")


class Reloader:
    """Runs a limiter's file checks on a worker thread, one at a time, and applies what they find.

    A job of the limiter's scheduler, run first: the jobs after it see what it applied.

    Args:
        file: The configuration file.
        scheduler: Runs the job when it falls due.
        apply: Acts on an outcome on the limiter's thread; returns whether a configuration
            was applied.
        prepare: Builds what the engine needs of a new configuration (``Controller.prepare``);
            called on the worker thread.

    Attributes:
        due: When the next check may start.
        next_run: When the job next runs (to start a check, or collect one in flight).
        closed: Whether :meth:`close` was called: no check starts any more.
    """

    __slots__ = (
        "file",
        "_scheduler",
        "_apply",
        "_prepare",
        "_running",
        "_outcome",
        "_done",
        "_pid",
        "due",
        "next_run",
        "closed",
    )

    def __init__(
        self,
        file: ConfigFile,
        scheduler: Scheduler,
        apply: Callable[[Outcome], bool],
        prepare: Callable[[Configuration], Classifier],
    ) -> None:
        self.file = file
        self._scheduler = scheduler
        self._apply = apply
        self._prepare = prepare
        # Held while a check runs; the worker releases it as its last act. None: no check
        # was started, or its outcome was collected.
        self._running: threading.Lock | None = None
        self._outcome: Outcome | None = None
        self._done = False  # set by the worker, read by the limiter's thread without waiting
        self._pid = 0  # the process the worker runs in: a forked child has no such thread
        self.due = NEVER
        self.next_run = NEVER
        self.closed = False
        scheduler.add(self, first=True, timed=True)  # a quiet server checks too

    @property
    def busy(self) -> bool:
        """Whether a check was started and its outcome not yet collected."""
        return self._running is not None

    def watch(self, now: float) -> None:
        """Check the file every ``file.interval`` seconds from ``now`` on."""
        self.due = now + self.file.interval
        self._scheduler.schedule(self, self.due)

    def run(self, now: float) -> None:
        """The job: :meth:`run_due`, logging what goes wrong (the call it runs in must go on)."""
        try:
            self.run_due(now)
        except Exception:
            logger.exception("reloading %s failed", self.file.path)

    def run_due(self, now: float) -> None:
        """Housekeeping: apply the outcome of a finished check; start the next check when due."""
        scheduler = self._scheduler
        if self._running is not None:
            if not self._done and not self._orphaned():
                return  # still running: next_run stays due, the next call looks again
            outcome = self._collect()
            scheduler.schedule(self, self._next_due())  # first: applying may raise
            if outcome is not None:
                self._take(outcome)
            if now < self.due:
                return
        if self._next_due() == NEVER:
            scheduler.schedule(self, NEVER)
            return
        self.due = now + self.file.interval
        scheduler.schedule(self, self.due)  # kept should the thread fail to start
        running = threading.Lock()
        running.acquire()
        self._done = False
        self._running = running
        self._pid = os.getpid()
        try:
            # Not threading.Thread: its start() waits until the new thread runs, 90 µs at the
            # median and milliseconds when the CPUs are busy, inside a request. This returns
            # once the thread exists (15 µs); close() and wait() wait on the lock instead.
            start_new_thread(self._run, (running,))
        except BaseException:
            self._running = None
            raise
        # Collect the outcome at the next call: a check that finds no change takes a stat.
        scheduler.schedule(self, now)

    def reload(self) -> bool:
        """Read the file now on the calling thread and apply it if it changed.

        A check in flight is waited for and its outcome applied first.
        """
        applied = False
        if self._running is not None:
            outcome = self._collect()
            self._scheduler.schedule(self, self._next_due())
            if outcome is not None:
                applied = self._take(outcome)
        outcome = self._prepared(self.file.check_now())
        if outcome is not None:
            applied = self._take(outcome) or applied
        return applied

    def wait(self) -> None:
        """Wait until the check in flight, if any, has finished (the next call applies it)."""
        running = self._running
        if running is not None and not self._orphaned():
            with running:
                pass

    def close(self) -> None:
        """Start no more checks; wait for the one in flight and drop its outcome."""
        self.closed = True
        self._collect()
        self._scheduler.schedule(self, NEVER)

    def _orphaned(self) -> bool:
        # Forked while a check ran: the child has the held lock but not the thread.
        if os.getpid() == self._pid:
            return False
        self._done = True
        self._outcome = None
        return True

    def _next_due(self) -> float:
        return NEVER if self.closed or not self.file.interval > 0 else self.due

    def _prepared(self, outcome: Outcome | None) -> Outcome | None:
        if outcome is not None and outcome.config is not None:
            outcome.classifier = self._prepare(outcome.config)
        return outcome

    def _take(self, outcome: Outcome) -> bool:
        applied = self._apply(outcome)
        if applied:
            self.file.applied = outcome.digest
            self.file.refused = b""
        return applied

    def _collect(self) -> Outcome | None:
        """Wait for the check in flight (if any) to finish, and take its outcome."""
        self.wait()
        self._running = None
        outcome = self._outcome
        self._outcome = None
        return outcome

    def _run(self, running: threading.Lock) -> None:
        # The worker thread: hand back what the check found, or what went wrong, to be acted
        # on by the limiter's own thread. Nothing runs after the release.
        try:
            self._outcome = self._prepared(self.file.check())
        except Exception as exc:
            self._outcome = Outcome(failure=exc)
        finally:
            self._done = True
            running.release()
