"""Collecting configuration problems, worded like Kubernetes' ``field.Error``.

Every message follows the formatting of ``k8s.io/apimachinery/pkg/util/validation/field``:
``Invalid value: <value>: <detail>``, ``Required value: <detail>``, ``Forbidden: <detail>``,
``Unsupported value: <value>: supported values: "A", "B"``, ``Duplicate value: <value>`` and
``Not found: <value>``. Values are printed as Go prints them: integers plainly, strings with
double quotes, string lists as ``[]string{"a", "b"}``.

A value that has the wrong type is reported once, where it was read; its path is then marked
*bad* and every later problem at or below that path is dropped, so that a placeholder standing in
for the bad value never produces a second, misleading message.
"""

from __future__ import annotations

import difflib
import json
import math
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from apf_limiter._errors import ConfigProblem

#: A mapping as a parser returns it: keys are usually, but not necessarily, strings.
RawMapping = Mapping[Any, object]


def join(base: str, child: str) -> str:
    """Return the path of field ``child`` below ``base`` (``base.child``, or ``child``)."""
    return f"{base}.{child}" if base else child


def index(base: str, i: int | str) -> str:
    """Return the path of element ``i`` of the list at ``base`` (``base[i]``)."""
    return f"{base}[{i}]"


def closest(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """Return the candidate closest to ``word`` (case-insensitive), or ``None`` if none is close."""
    by_folded: dict[str, str] = {}
    for candidate in candidates:
        by_folded.setdefault(candidate.lower(), candidate)
    matches = difflib.get_close_matches(word.lower(), list(by_folded), n=1, cutoff=cutoff)
    return by_folded[matches[0]] if matches else None


def _go_string(text: str) -> str:
    # Go's %q escapes like JSON for everything a config file realistically holds.
    return json.dumps(text, ensure_ascii=False)


def _go_float(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number.is_integer() and abs(number) < 1e21:
        return str(int(number))
    return repr(number)


#: Characters of a bad value shown in a problem at most: a value can be huge (a YAML alias
#: bomb expands 400 bytes into 10**8 strings), and a message should stay readable.
MAX_VALUE_CHARS = 1000


def go_value(value: object) -> str:
    """Format ``value`` the way Go's ``field.Error`` prints a bad value.

    Values longer than :data:`MAX_VALUE_CHARS` are cut short (``...``); a value that cannot
    be formatted at all (nested too deeply, an integer of more digits than Python converts)
    is named by its type.
    """
    try:
        text = _go_value(value)
    except (ValueError, RecursionError):
        if isinstance(value, int):
            return f"<an integer of {value.bit_length()} bits>"
        return f"<a {type(value).__name__} that cannot be printed>"
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + "..."
    return text


def _go_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_string(value)
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return "[]string{" + _joined_to_limit((_go_string(str(i)) for i in value), ", ") + "}"
    # Encoded lazily, chunk by chunk, and stopped past the limit: never the whole of a huge
    # value.
    encoder = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)
    try:
        return _joined_to_limit(encoder.iterencode(value), "")
    except TypeError:  # keys of mixed types cannot be sorted: a bounded repr instead
        return _BOUNDED_REPR.repr(value)


def _joined_to_limit(parts: Iterable[str], separator: str) -> str:
    """``separator.join(parts)``, taking parts only until the text passes the limit."""
    taken: list[str] = []
    length = 0
    for part in parts:
        taken.append(part)
        length += len(part) + len(separator)
        if length > MAX_VALUE_CHARS:
            break
    return separator.join(taken)


# reprlib cuts every level of a value short, so an alias bomb is never expanded in full.
_BOUNDED_REPR = reprlib.Repr()
_BOUNDED_REPR.maxstring = _BOUNDED_REPR.maxother = MAX_VALUE_CHARS


class Problems:
    """An ordered collection of :class:`~apf_limiter._errors.ConfigProblem`.

    Attributes:
        items: The problems found so far, in order.
    """

    def __init__(self) -> None:
        self.items: list[ConfigProblem] = []
        self._bad: set[str] = set()

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def is_bad(self, path: str) -> bool:
        """Whether ``path`` is at or below a path whose value had the wrong type."""
        candidate = path
        while True:
            if candidate in self._bad:
                return True
            cut = max(candidate.rfind("."), candidate.rfind("["))
            if cut <= 0:
                return False
            candidate = candidate[:cut]

    def mark_bad(self, path: str) -> None:
        """Drop every later problem at or below ``path``."""
        self._bad.add(path)

    def add(self, path: str, message: str) -> None:
        """Record a problem unless ``path`` lies under a bad value."""
        if not self.is_bad(path):
            self.items.append(ConfigProblem(path, message))

    def wrong_type(self, path: str, value: object, detail: str) -> None:
        """Record a value of the wrong type, and mark ``path`` bad."""
        self.add(path, f"Invalid value: {go_value(value)}: {detail}")
        self.mark_bad(path)

    def invalid(self, path: str, value: object, detail: str) -> None:
        """Record ``Invalid value: <value>: <detail>``."""
        self.add(path, f"Invalid value: {go_value(value)}: {detail}")

    def invalid_omitted(self, path: str, detail: str) -> None:
        """Record ``Invalid value: <detail>`` (Go's ``field.OmitValueType``)."""
        self.add(path, f"Invalid value: {detail}")

    def required(self, path: str, detail: str = "") -> None:
        """Record ``Required value[: <detail>]``."""
        self.add(path, f"Required value: {detail}" if detail else "Required value")

    def forbidden(self, path: str, detail: str) -> None:
        """Record ``Forbidden: <detail>``."""
        self.add(path, f"Forbidden: {detail}")

    def not_supported(self, path: str, value: object, supported: Iterable[str]) -> None:
        """Record ``Unsupported value: <value>: supported values: "A", "B"``."""
        listed = ", ".join(_go_string(s) for s in supported)
        self.add(path, f"Unsupported value: {go_value(value)}: supported values: {listed}")

    def duplicate(self, path: str, value: object) -> None:
        """Record ``Duplicate value: <value>``."""
        self.add(path, f"Duplicate value: {go_value(value)}")

    def not_found(self, path: str, value: object, detail: str) -> None:
        """Record ``Not found: <value>: <detail>``."""
        self.add(path, f"Not found: {go_value(value)}: {detail}")

    def unknown_fields(self, path: str, raw: RawMapping, known: Sequence[str]) -> None:
        """Record every key of ``raw`` not in ``known``, suggesting the closest known key.

        When the suggested key is absent, the misspelling explains whatever is wrong with it
        (typically "Required value"), so problems at the suggested key are dropped.
        """
        for key in raw:
            name = go_value(key) if type(key) is int else str(key)  # a key of 5,000 digits
            if name in known:
                continue
            suggestion = closest(name, known)
            message = "Unknown field"
            if suggestion is not None:
                message += f': did you mean "{suggestion}"?'
                if suggestion not in raw:
                    self.mark_bad(join(path, suggestion))
            self.add(join(path, name), message)
