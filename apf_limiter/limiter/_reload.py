"""Reloading a configuration file when it changes (``Limiter.from_file(..., reload=True)``)."""

from __future__ import annotations

import os
from os import PathLike


class ConfigFile:
    """The configuration file a limiter was created from, and what it held when last read.

    Args:
        path: The file.
        interval: Seconds between checks; 0 means the file is never checked on its own.
    """

    __slots__ = ("path", "content", "interval")

    def __init__(self, path: str | PathLike[str], interval: float = 0.0) -> None:
        self.path = os.fspath(path)
        self.content = read_config(self.path)
        self.interval = interval

    def changed(self) -> bool:
        """Read the file again; whether its content differs from the last reading (kept)."""
        content = read_config(self.path)
        if content == self.content:
            return False
        self.content = content
        return True


def read_config(path: str) -> bytes | None:
    """The file's content, or ``None`` if it cannot be read: what a reload compares.

    The content itself, not its modification time and size: a file rewritten in place with the
    same size within the file system's timestamp resolution (or by ``cp -p``) has changed too.
    Configuration files are small, and this runs at most every ``reload_interval``.
    """
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None
