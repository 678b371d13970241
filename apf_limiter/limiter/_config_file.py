"""The configuration file of a reloading limiter: what a check reads, when, and what it found.

See :mod:`._reload` for the whole design (a worker thread runs the checks). A check stats the
file, reads it once a changed stat has held still long enough, and loads what it read; the
stat rules that make a half-written file wait are here, in :class:`ConfigFile`.
"""

from __future__ import annotations

import hashlib
import os
from os import PathLike
from typing import Final

from apf_limiter._errors import ConfigError
from apf_limiter.config._model import Configuration
from apf_limiter.config._settings import DEFAULT_MAX_FILE_SIZE
from apf_limiter.engine._classifier import Classifier

#: What a check compares: device, inode (a file renamed over the old one), size, modification
#: and change times; ``None`` when the file cannot be stat'ed (missing).
StatKey = tuple[int, int, int, int, int]
# No stat of a file that exists or not: what was read was not stable, so nothing is settled.
_UNKNOWN: Final[StatKey] = (-1, -1, -1, -1, -1)

# Reads at start (and for an explicit reload) until one is not overlapped by a write.
_READ_ATTEMPTS: Final = 3
# Checks a changed stat must hold for before the file is read: written in place (the same
# device and inode as the content read last), two, so that a writer pausing for longer than one
# interval (a first line, then the rest) is not read half-written; a new file, one.
_QUIET_IN_PLACE: Final = 2
_QUIET_NEW_FILE: Final = 1


class Outcome:
    """What a check found that the limiter must act on: exactly one of the three is set.

    Args:
        config: A new configuration to apply, parsed and validated.
        digest: The digest of the content ``config`` was loaded from.
        error: Why the file's content was refused (the running configuration stays).
        failure: An unexpected exception raised by the check (a bug), to be logged.

    Attributes:
        classifier: What the engine builds of ``config`` alone (``Controller.prepare``), built
            by the worker so that the limiter's thread does not.
    """

    __slots__ = ("config", "digest", "error", "failure", "classifier")

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
        self.classifier: Classifier | None = None


class ConfigFile:
    """The configuration file a limiter was created from, and what was seen of it.

    Args:
        path: The file.
        interval: Seconds between checks; 0 means the file is never checked on its own.
        max_size: The largest file read, in bytes.

    Attributes:
        applied: Digest of the content the running configuration was loaded from.
        refused: Digest of the content refused last (not reported again while it stays).
        seen: The stat at the last check.
        quiet: How many checks in a row have seen ``seen`` again.
        settled: The stat of the content read last: while the file keeps it, no read.
        reads: How many times the file was read (what the tests count).
    """

    __slots__ = (
        "path",
        "interval",
        "max_size",
        "applied",
        "refused",
        "seen",
        "quiet",
        "settled",
        "reads",
    )

    def __init__(
        self,
        path: str | PathLike[str],
        interval: float = 0.0,
        max_size: int = DEFAULT_MAX_FILE_SIZE,
    ) -> None:
        self.path = os.fspath(path)
        self.interval = interval
        self.max_size = max_size
        # Digests, not the content: a big file is not held twice in memory.
        self.applied = b""
        self.refused = b""
        self.seen: StatKey | None = None
        self.quiet = 0
        self.settled: StatKey | None = None
        self.reads = 0

    def load(self) -> Configuration:
        """Read and load the file at start, and remember its content as the running one.

        Raises:
            ConfigError: If the file cannot be read, holds no document or is invalid.
        """
        key, data, error, stable = self._read_stable()
        if error is not None:
            raise error
        config = _load(data, self.path)
        self.applied = _digest(data)
        # Read while being written, every time: the first check reads it again once it holds
        # still (and applies it if it differs). At start there is nothing else to run.
        self.seen = self.settled = key if stable else _UNKNOWN
        return config

    def check(self) -> Outcome | None:
        """A periodic check: act on a changed file once its stat stayed the same long enough.

        That is one check for a new file (renamed over the old one), two for the same file
        written in place.

        Returns:
            What to act on, or ``None`` when there is nothing to do.
        """
        key = stat_key(self.path)
        if key == self.settled:
            self.seen = key
            return None
        if key != self.seen:
            # Changed since the last check: its writer may not be done. Wait.
            self.seen = key
            self.quiet = 0
            return None
        self.quiet += 1
        if self.quiet < self._quiet_needed(key):
            return None
        data, error, after = self._read()
        if after != key:
            # Written while it was read: wait until it holds still.
            self.seen = after
            self.quiet = 0
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

    def _quiet_needed(self, key: StatKey | None) -> int:
        settled = self.settled
        if key is not None and settled is not None and key[:2] == settled[:2]:
            return _QUIET_IN_PLACE
        return _QUIET_NEW_FILE

    def _take(
        self,
        key: StatKey | None,
        data: bytes,
        error: ConfigError | None,
        *,
        repeat_refusal: bool,
    ) -> Outcome | None:
        """Act on a stable read: the content is now settled, whatever comes of it."""
        self.seen = self.settled = key
        if error is not None:
            return Outcome(error=error)
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
    ) -> tuple[StatKey | None, bytes, ConfigError | None, bool]:
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

    def _read(self) -> tuple[bytes, ConfigError | None, StatKey | None]:
        """The file's content (or why it cannot be read), and its stat after the read."""
        # Looked up at each call, as the loads are.
        from apf_limiter.config._text import read_file_bytes

        self.reads += 1
        data = b""
        error: ConfigError | None = None
        try:
            # Never blocks: a named pipe or a device is refused, and at most max_size + 1
            # bytes are read.
            data = read_file_bytes(self.path, self.max_size)
        except ConfigError as exc:
            error = exc
        return data, error, stat_key(self.path)


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
