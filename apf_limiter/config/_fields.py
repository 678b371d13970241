"""Typed, path-aware reading of one mapping of a configuration document.

A :class:`Reader` wraps a mapping, reports its unknown keys (with a "did you mean"), and returns
each known field converted to its Python type. A field of the wrong type is reported where it is
read and yields ``None`` (as if absent); the Kubernetes zero value or default then stands in for
it, and :class:`~apf_limiter.config._problems.Problems` drops any later message about that field.
``null`` is treated as absent, as Go's JSON decoder does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from apf_limiter.config._problems import Problems, RawMapping, index, join

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_EMPTY: RawMapping = {}


class Reader:
    """Reads the fields of one mapping, reporting problems with their field paths.

    Attributes:
        raw: The mapping being read.
        path: The field path of the mapping (``""`` at the top of a document).
        problems: Where problems are recorded.
    """

    def __init__(
        self,
        raw: RawMapping,
        path: str,
        problems: Problems,
        known: Sequence[str] | None = None,
    ) -> None:
        self.raw = raw
        self.path = path
        self.problems = problems
        if known is not None:
            problems.unknown_fields(path, raw, known)

    def child_path(self, key: str) -> str:
        """Return the field path of ``key`` in this mapping."""
        return join(self.path, key)

    def get(self, key: str) -> object | None:
        """Return the raw value of ``key``, or ``None`` when it is absent or null."""
        return self.raw.get(key)

    def has(self, key: str) -> bool:
        """Whether ``key`` is present with a non-null value."""
        return self.raw.get(key) is not None

    def integer(self, key: str, *, int32: bool = True) -> int | None:
        """Return ``key`` as an integer (booleans are not integers)."""
        value = self.raw.get(key)
        if value is None:
            return None
        path = self.child_path(key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.wrong_type(path, value, "must be an integer")
            return None
        if int32 and not INT32_MIN <= value <= INT32_MAX:
            self.problems.wrong_type(path, value, "must fit in a 32-bit signed integer")
            return None
        return value

    def number(self, key: str) -> float | None:
        """Return ``key`` as a finite number of seconds."""
        value = self.raw.get(key)
        if value is None:
            return None
        path = self.child_path(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problems.wrong_type(path, value, "must be a number")
            return None
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            self.problems.wrong_type(path, value, "must be a finite number")
            return None
        return float(value)

    def string(self, key: str) -> str | None:
        """Return ``key`` as a string."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.problems.wrong_type(self.child_path(key), value, "must be a string")
            return None
        return value

    def boolean(self, key: str) -> bool | None:
        """Return ``key`` as a boolean."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            self.problems.wrong_type(self.child_path(key), value, "must be a boolean")
            return None
        return value

    def strings(self, key: str) -> list[str]:
        """Return ``key`` as a list of strings (empty when absent).

        A bad element is reported at its index and the whole list is then treated as bad, so
        list-level rules do not run on a list that is not what the user wrote.
        """
        value = self.raw.get(key)
        if value is None:
            return []
        path = self.child_path(key)
        if isinstance(value, str) or not isinstance(value, Sequence):
            self.problems.wrong_type(path, value, "must be a list of strings")
            return []
        result: list[str] = []
        bad = False
        for i, item in enumerate(value):
            if isinstance(item, str):
                result.append(item)
            else:
                self.problems.wrong_type(index(path, i), item, "must be a string")
                bad = True
                result.append("")
        if bad:
            self.problems.mark_bad(path)
        return result

    def mapping(self, key: str, known: Sequence[str] | None) -> Reader | None:
        """Return a reader of the mapping at ``key``, or ``None`` when absent or not a mapping."""
        value = self.raw.get(key)
        if value is None:
            return None
        path = self.child_path(key)
        if not isinstance(value, Mapping):
            self.problems.wrong_type(path, value, "must be a mapping")
            return None
        return Reader(value, path, self.problems, known)

    def mappings(self, key: str, known: Sequence[str] | None) -> list[Reader]:
        """Return a reader per element of the list of mappings at ``key`` (empty when absent).

        A bad element is reported and replaced by an empty placeholder whose problems are
        dropped, so that the indices of the other elements stay those the user wrote.
        """
        value = self.raw.get(key)
        if value is None:
            return []
        path = self.child_path(key)
        if isinstance(value, str) or not isinstance(value, Sequence):
            self.problems.wrong_type(path, value, "must be a list")
            return []
        readers: list[Reader] = []
        for i, item in enumerate(value):
            item_path = index(path, i)
            if isinstance(item, Mapping):
                readers.append(Reader(item, item_path, self.problems, known))
            else:
                self.problems.wrong_type(item_path, item, "must be a mapping")
                readers.append(Reader(_EMPTY, item_path, self.problems))
        return readers
