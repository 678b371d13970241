"""Reloading a configuration file when it changes (``Limiter.from_file(..., reload=True)``).

The request path never reads or parses the file. When a check falls due, the :class:`Reloader`
(a job of the shell's scheduler) starts it, from whichever call came (an admission, a release),
on a worker thread, at most one at a
time, and returns; a later call collects what the check found and applies it, which is engine
work only (the configuration arrives parsed and validated).

A check stats the file first. It reads the file only when the stat (device, inode, size,
modification and change times in nanoseconds) differs from the one whose content was read last,
and only once that new stat has stayed the same for one check: a file caught while being
written (truncated, then written again) is not read before the writer is done, and an unchanged
file, however big, is never read again. A read counts only if the stat after it agrees with the
stat before. Content that is the same as the running configuration's (a ``touch``) is not
applied again; content refused once is not reported again until it changes.

The stat is trusted because the kernel sets the change time (``st_ctime``) on every write and
nobody can set it back (``cp -p`` and ``os.utime`` set the modification time, and move the
change time): a write after a read falls at least one check interval after the previous change,
so it moves the change time unless the file system's timestamps are coarser than the interval.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from _thread import start_new_thread
from collections.abc import Callable
from os import PathLike
from typing import Final

from apf_limiter._errors import ConfigError
from apf_limiter.config._model import Configuration
from apf_limiter.limiter._scheduler import NEVER, Scheduler

#: What a check compares: device, inode (a file renamed over the old one), size, modification
#: and change times; ``None`` when the file cannot be stat'ed (missing).
StatKey = tuple[int, int, int, int, int]
# No stat of a file that exists or not: what was read was not stable, so nothing is settled.
_UNKNOWN: Final[StatKey] = (-1, -1, -1, -1, -1)

# Reads at start (and for an explicit reload) until one is not overlapped by a write.
_READ_ATTEMPTS: Final = 3

logger = logging.getLogger("apf_limiter")


class Outcome:
    """What a check found that the limiter must act on: exactly one of the three is set.

    Args:
        config: A new configuration to apply, parsed and validated.
        digest: The digest of the content ``config`` was loaded from.
        error: Why the file's content was refused (the running configuration stays).
        failure: An unexpected exception raised by the check (a bug), to be logged.
    """

    __slots__ = ("config", "digest", "error", "failure")

    def __init__(
        self,
        config: Configuration | None = None,
        digest: bytes = b"",
        error: ConfigError | None = None,
        failure: Exception | None = None,
    ) -> None:
        self.config = config
        self.digest = digest
        self.error = error
        self.failure = failure


class ConfigFile:
    """The configuration file a limiter was created from, and what was seen of it.

    Args:
        path: The file.
        interval: Seconds between checks; 0 means the file is never checked on its own.

    Attributes:
        applied: Digest of the content the running configuration was loaded from.
        refused: Digest of the content refused last (not reported again while it stays).
        seen: The stat at the last check.
        settled: The stat of the content read last: while the file keeps it, no read.
        reads: How many times the file was read (what the tests count).
    """

    __slots__ = ("path", "interval", "applied", "refused", "seen", "settled", "reads")

    def __init__(self, path: str | PathLike[str], interval: float = 0.0) -> None:
        self.path = os.fspath(path)
        self.interval = interval
        # Digests, not the content: a big file is not held twice in memory.
        self.applied = b""
        self.refused = b""
        self.seen: StatKey | None = None
        self.settled: StatKey | None = None
        self.reads = 0

    def load(self) -> Configuration:
        """Read and load the file at start, and remember its content as the running one.

        Raises:
            ConfigError: If the file cannot be read, holds no document or is invalid.
        """
        key, data, error, stable = self._read_stable()
        if error is not None:
            raise _unreadable(self.path, error)
        config = _load(data, self.path)
        self.applied = _digest(data)
        # Read while being written, every time: the first check reads it again once it holds
        # still (and applies it if it differs). At start there is nothing else to run.
        self.seen = self.settled = key if stable else _UNKNOWN
        return config

    def check(self) -> Outcome | None:
        """A periodic check: act on a changed file once its stat stayed the same for a check.

        Returns:
            What to act on, or ``None`` when there is nothing to do.
        """
        key = stat_key(self.path)
        if key == self.settled:
            self.seen = key
            return None
        if key != self.seen:
            # Changed since the last check: its writer may not be done. Wait for one check.
            self.seen = key
            return None
        data, error, after = self._read()
        if after != key:
            self.seen = after  # written while it was read: wait until it holds still
            return None
        return self._take(key, data, error, repeat_refusal=False)

    def check_now(self) -> Outcome | None:
        """An explicit reload: read the file now, changed stat or not (no stability wait).

        Returns:
            What to act on, or ``None``: nothing changed, or the file kept changing while it
            was read (the next periodic check takes it once it holds still).
        """
        key, data, error, stable = self._read_stable()
        if not stable:
            self.seen = _UNKNOWN
            return None
        return self._take(key, data, error, repeat_refusal=True)

    def _take(
        self,
        key: StatKey | None,
        data: bytes,
        error: OSError | ValueError | None,
        *,
        repeat_refusal: bool,
    ) -> Outcome | None:
        """Act on a stable read: the content is now settled, whatever comes of it."""
        self.seen = self.settled = key
        if error is not None:
            return Outcome(error=_unreadable(self.path, error))
        digest = _digest(data)
        if digest == self.applied:
            self.refused = b""
            return None  # what runs already (a touch, or the content put back)
        if digest == self.refused and not repeat_refusal:
            return None  # refused and reported already
        try:
            config = _load(data, self.path)
        except ConfigError as exc:
            self.refused = digest
            return Outcome(error=exc)
        return Outcome(config=config, digest=digest)

    def _read_stable(
        self,
    ) -> tuple[StatKey | None, bytes, OSError | ValueError | None, bool]:
        """Read until the stat after a read agrees with the one before (a few attempts).

        Returns:
            The stat, the content, why it could not be read, and whether the read was stable.
        """
        key = stat_key(self.path)
        for _ in range(_READ_ATTEMPTS):
            data, error, after = self._read()
            if after == key:
                return key, data, error, True
            key = after
        return key, data, error, False

    def _read(self) -> tuple[bytes, OSError | ValueError | None, StatKey | None]:
        """The file's content (or why it cannot be read), and its stat after the read."""
        self.reads += 1
        data = b""
        error: OSError | ValueError | None = None
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
            error = exc
        return data, error, stat_key(self.path)


class Reloader:
    """Runs a limiter's file checks on a worker thread, one at a time, and applies what they find.

    A job of the limiter's scheduler, run first: the jobs after it see what it applied.

    Args:
        file: The configuration file.
        scheduler: Runs the job when it falls due.
        apply: Acts on an outcome on the limiter's thread; returns whether a configuration
            was applied.

    Attributes:
        due: When the next check may start.
        next_run: When the job next runs (to start a check, or collect one in flight).
        closed: Whether :meth:`close` was called: no check starts any more.
    """

    __slots__ = (
        "file",
        "_scheduler",
        "_apply",
        "_running",
        "_outcome",
        "_done",
        "_pid",
        "due",
        "next_run",
        "closed",
    )

    def __init__(
        self, file: ConfigFile, scheduler: Scheduler, apply: Callable[[Outcome], bool]
    ) -> None:
        self.file = file
        self._scheduler = scheduler
        self._apply = apply
        # Held while a check runs; the worker releases it as its last act. None: no check
        # was started, or its outcome was collected.
        self._running: threading.Lock | None = None
        self._outcome: Outcome | None = None
        self._done = False  # set by the worker, read by the limiter's thread without waiting
        self._pid = 0  # the process the worker runs in: a forked child has no such thread
        self.due = NEVER
        self.next_run = NEVER
        self.closed = False
        scheduler.add(self, first=True)

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
        outcome = self.file.check_now()
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
            self._outcome = self.file.check()
        except Exception as exc:
            self._outcome = Outcome(failure=exc)
        finally:
            self._done = True
            running.release()


def stat_key(path: str) -> StatKey | None:
    """What a check compares of the file (``None``: it cannot be stat'ed)."""
    try:
        result = os.stat(path)
    except (OSError, ValueError):
        return None
    return (
        result.st_dev,
        result.st_ino,
        result.st_size,
        result.st_mtime_ns,
        result.st_ctime_ns,
    )


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _load(data: bytes, path: str) -> Configuration:
    # Looked up at each call, as the limiter's other loads are.
    from apf_limiter.config._sources import load_file_content

    return load_file_content(data, path)


def _unreadable(path: str, error: OSError | ValueError) -> ConfigError:
    from apf_limiter.config._text import unreadable

    return unreadable(path, error)
