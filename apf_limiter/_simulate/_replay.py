"""Reading a recorded access log for ``apf-limiter replay``: JSON lines or combined format.

Every line that cannot be read is counted and kept (the first few, with their line numbers and
why), never dropped silently. A line is read with a bounded length: a longer one is counted as
unreadable without being held in memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Final

from apf_limiter._digest import AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP, RequestDigest

#: Longest line read, in bytes.
MAX_LINE: Final = 64 * 1024
#: How many unreadable lines are shown (all are counted).
SHOWN_BAD_LINES: Final = 5
#: Most requests replayed from one log (an hour at 1,000 a second, with room); the rest of the
#: log is not read, and the command says so.
MAX_REQUESTS: Final = 4_000_000
#: Most distinct request digests shared between lines (user, client, method, path).
_MAX_SHARED_DIGESTS: Final = 100_000

FIELDS: Final = ("start", "duration", "user", "client", "method", "path")
#: The default field of each role in a JSON line.
JSON_DEFAULTS: Final = {
    "start": "start",
    "duration": "duration",
    "user": "user",
    "client": "client",
    "method": "method",
    "path": "path",
}
#: The fields of a combined-format line; ``request_time`` is the field after the user agent.
COMBINED_DEFAULTS: Final = {
    "start": "time",
    "duration": "request_time",
    "user": "user",
    "client": "host",
    "method": "method",
    "path": "path",
}
_COMBINED: Final = re.compile(
    r"(?P<host>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    r'"(?P<method>[A-Za-z]+) (?P<path>\S+)(?: [^"]*)?" (?P<status>\d{3}|-) (?P<bytes>\d+|-)'
    r'(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)")?(?: (?P<request_time>\S+))?(?: .*)?$'
)
_UNITS: Final = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass
class LogRead:
    """What was read from a log: the arrivals (start, flow, digest, duration), sorted."""

    arrivals: list[tuple[float, str, RequestDigest, float]] = field(default_factory=list)
    lines: int = 0
    bad: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    truncated: bool = False


def parse_fields(options: list[str], form: str) -> dict[str, str]:
    """``role=name`` options over the format's defaults.

    Raises:
        ValueError: For an option that is not ``role=name`` or names an unknown role.
    """
    mapping = dict(JSON_DEFAULTS if form == "json" else COMBINED_DEFAULTS)
    for option in options:
        role, sep, name = option.partition("=")
        if not sep or not name or role not in FIELDS:
            raise ValueError(
                f"--field {option!r}: expected ROLE=NAME with ROLE one of {', '.join(FIELDS)}"
            )
        # A combined line has these fields and no others: another name would read nothing, and
        # a user or client read from nothing would quietly make every request anonymous.
        if form == "combined" and name not in _COMBINED.groupindex:
            raise ValueError(
                f"--field {option!r}: a combined log line has no field {name!r}; its fields "
                f"are {', '.join(_COMBINED.groupindex)}"
            )
        mapping[role] = name
    return mapping


def read_log(stream: IO[bytes], form: str, mapping: Mapping[str, str], unit: str = "s") -> LogRead:
    """Read a log; each line gives a request's start, duration, user or client, method, path."""
    result = LogRead()
    scale = _UNITS[unit]
    # Lines of the same user, client, method and path share one digest: memory per request
    # stays a tuple and two floats.
    digests: dict[tuple[str, str, str, str], RequestDigest] = {}
    number = 0
    while True:
        raw = stream.readline(MAX_LINE + 1)
        if not raw:
            break
        number += 1
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            while True:  # skip the rest of the line without holding it
                rest = stream.readline(MAX_LINE)
                if not rest or rest.endswith(b"\n"):
                    break
            _bad(result, number, f"longer than {MAX_LINE} bytes")
            continue
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            continue
        result.lines += 1
        try:
            values = _json_values(text) if form == "json" else _combined_values(text)
            result.arrivals.append(_arrival(values, mapping, scale, digests))
        except (ValueError, TypeError) as error:
            _bad(result, number, str(error) or type(error).__name__)
            continue
        if len(result.arrivals) >= MAX_REQUESTS:
            result.truncated = True
            break
    if result.arrivals:
        first = min(arrival[0] for arrival in result.arrivals)
        result.arrivals = sorted(
            (
                (at - first, flow, digest, duration)
                for at, flow, digest, duration in result.arrivals
            ),
            key=lambda arrival: arrival[0],
        )
    return result


def _bad(result: LogRead, number: int, why: str) -> None:
    result.bad += 1
    if len(result.bad_lines) < SHOWN_BAD_LINES:
        result.bad_lines.append((number, why[:200]))


def _json_values(text: str) -> Mapping[str, object]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _combined_values(text: str) -> Mapping[str, object]:
    match = _COMBINED.match(text)
    if match is None:
        raise ValueError("not in the combined log format")
    return {k: v for k, v in match.groupdict().items() if v is not None}


def _arrival(
    values: Mapping[str, object],
    mapping: Mapping[str, str],
    scale: float,
    digests: dict[tuple[str, str, str, str], RequestDigest],
) -> tuple[float, str, RequestDigest, float]:
    start = _time(_get(values, mapping, "start"))
    duration_value = _get(values, mapping, "duration")
    duration = float(duration_value) * scale  # type: ignore[arg-type]
    if not math.isfinite(duration) or duration < 0:
        raise ValueError(f"duration {duration_value!r} is not a non-negative number")
    user = str(values.get(mapping["user"], "") or "")
    client = str(values.get(mapping["client"], "") or "")
    if user in ("", "-"):
        groups: tuple[str, ...] = (UNAUTHENTICATED_GROUP,)
        user = "system:anonymous"
    else:
        groups = (AUTHENTICATED_GROUP,)
    method = str(_get(values, mapping, "method"))
    path = str(_get(values, mapping, "path")).split("?", 1)[0]
    key = (user, client, method, path)
    digest = digests.get(key)
    if digest is None:
        digest = RequestDigest(user=user, groups=groups, verb=method, path=path, client=client)
        if len(digests) < _MAX_SHARED_DIGESTS:
            digests[key] = digest
    return start, "log", digest, duration


def _get(values: Mapping[str, object], mapping: Mapping[str, str], role: str) -> object:
    name = mapping[role]
    if name not in values:
        raise ValueError(f"no {role} field {name!r}")
    return values[name]


def _time(value: object) -> float:
    """Seconds from an epoch number, an ISO 8601 time or a combined-log time."""
    if type(value) is not bool and isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = datetime.strptime(value, "%d/%b/%Y:%H:%M:%S %z").timestamp()
            except ValueError:
                seconds = datetime.fromisoformat(value).timestamp()
    else:
        raise ValueError(f"start {value!r} is not a time")
    if not math.isfinite(seconds):
        raise ValueError(f"start {value!r} is not a time")
    return seconds
