"""Server-wide settings: the server limit, wait limit, borrowing period and enforcement.

The keys are ``serverConcurrencyLimit``, ``requestWaitLimit``, ``borrowingPeriod``,
``enforcement``, ``priorityLevelEnforcement``, ``rejectionStatus``,
``priorityLevelRejectionStatus`` and ``adaptiveConcurrency`` (read by ``config/_adaptive.py``).

Their defaults, their bounds, and their reading and checking from the one document in our
shape that holds them (settings are addressed by their bare names). Nothing else of the
package is imported at run time: the shell imports :data:`MAX_REQUEST_WAIT_LIMIT` and
:data:`DEFAULT_MAX_FILE_SIZE` from here, and the model its defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from apf_limiter.config._fields import Reader
    from apf_limiter.config._problems import Problems

_V = TypeVar("_V", str, int)

#: The settings' keys, in the order problems and messages list them.
SETTING_KEYS: tuple[str, ...] = (
    "serverConcurrencyLimit",
    "requestWaitLimit",
    "borrowingPeriod",
    "enforcement",
    "priorityLevelEnforcement",
    "rejectionStatus",
    "priorityLevelRejectionStatus",
    "adaptiveConcurrency",
)

DEFAULT_SERVER_CONCURRENCY_LIMIT = 600
DEFAULT_REQUEST_WAIT_LIMIT = 15.0
DEFAULT_BORROWING_PERIOD = 10.0
#: The largest configuration file read by default (``max_file_size``): 4 MiB, four times what a
#: Kubernetes ConfigMap (the usual way to mount one) can hold, and room for about 12,000 flow
#: schemas; what loading one that big costs: docs/configuration.md, "Very large
#: configurations".
DEFAULT_MAX_FILE_SIZE = 4 * 1024 * 1024


def check_max_file_size(max_size: object) -> int:
    """Check a file size limit given by a caller; return it.

    Raises:
        ValueError: If it is not a positive integer.
    """
    if type(max_size) is not int or max_size <= 0:
        raise ValueError(f"max_file_size must be a positive integer of bytes, got {max_size!r}")
    return max_size


#: Kubernetes caps any queue wait at one minute.
MAX_REQUEST_WAIT_LIMIT = 60.0
#: Kubernetes adjusts every 10 s; far shorter periods only burn CPU (a subnormal one broke the
#: schedule's arithmetic), so a millisecond is the floor.
MIN_BORROWING_PERIOD = 0.001
#: ``Enforce`` (the default) holds and rejects requests; ``Shadow`` lets every request run at
#: once and only reports what enforcing would have done.
ENFORCEMENTS: tuple[str, ...] = ("Enforce", "Shadow")
DEFAULT_ENFORCEMENT = "Enforce"
#: The HTTP status of a rejection: ``429 Too Many Requests`` (Kubernetes'), or ``503 Service
#: Unavailable`` (what uvicorn's ``--limit-concurrency`` and most proxies answer).
REJECTION_STATUSES: tuple[int, ...] = (429, 503)
DEFAULT_REJECTION_STATUS = 429
#: The algorithms of ``adaptiveConcurrency`` (``engine/_adaptive.py``); the default was chosen
#: by ``benchmarks/adaptive_bench.py``.
ADAPTIVE_ALGORITHMS: tuple[str, ...] = ("Gradient", "AIMD")
DEFAULT_ADAPTIVE_ALGORITHM = "Gradient"


def read_settings(reader: Reader | None, problems: Problems) -> tuple[int, float, float]:
    """Read and check the settings, defaulting each one that is absent or of the wrong type.

    Args:
        reader: Reader of the document holding the settings, or ``None`` when none does.
        problems: Where problems are recorded.

    Returns:
        The server concurrency limit, the request wait limit and the borrowing period.
    """
    if reader is None:
        return (
            DEFAULT_SERVER_CONCURRENCY_LIMIT,
            DEFAULT_REQUEST_WAIT_LIMIT,
            DEFAULT_BORROWING_PERIOD,
        )
    # A 32-bit integer, as every other count here: far beyond any real server, and the
    # concurrency plan's arithmetic (in floats, as Kubernetes') stays exact.
    server_limit = reader.integer("serverConcurrencyLimit")
    if server_limit is None:
        server_limit = DEFAULT_SERVER_CONCURRENCY_LIMIT
    elif server_limit <= 0:
        problems.invalid("serverConcurrencyLimit", server_limit, "must be positive")
    wait_limit = reader.number("requestWaitLimit")
    if wait_limit is None:
        wait_limit = DEFAULT_REQUEST_WAIT_LIMIT
    elif wait_limit <= 0:
        problems.invalid("requestWaitLimit", wait_limit, "must be positive")
    elif wait_limit > MAX_REQUEST_WAIT_LIMIT:
        problems.invalid(
            "requestWaitLimit", wait_limit, f"must not be greater than {MAX_REQUEST_WAIT_LIMIT:g}"
        )
    period = reader.number("borrowingPeriod")
    if period is None:
        period = DEFAULT_BORROWING_PERIOD
    elif period <= 0:
        problems.invalid("borrowingPeriod", period, "must be positive")
    elif period < MIN_BORROWING_PERIOD:
        problems.invalid(
            "borrowingPeriod", period, f"must be at least {MIN_BORROWING_PERIOD:g} (seconds)"
        )
    return server_limit, wait_limit, period


def read_enforcement(
    reader: Reader | None, level_names: set[str], problems: Problems
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Read ``enforcement`` and ``priorityLevelEnforcement`` (level name to enforcement).

    Args:
        reader: Reader of the document holding the settings, or ``None`` when none does.
        level_names: The configured priority levels' names (mandatory ones included).
        problems: Where problems are recorded.

    Returns:
        The enforcement of every level, and the levels that override it (sorted by name).
    """
    if reader is None:
        return DEFAULT_ENFORCEMENT, ()
    return _server_and_levels(
        reader,
        ("enforcement", "priorityLevelEnforcement"),
        lambda fields, key: fields.string(key),
        ENFORCEMENTS,
        ENFORCEMENTS,
        DEFAULT_ENFORCEMENT,
        level_names,
        problems,
    )


def read_rejection_status(
    reader: Reader | None, level_names: set[str], problems: Problems
) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Read ``rejectionStatus`` and ``priorityLevelRejectionStatus`` (level name to status).

    Args:
        reader: Reader of the document holding the settings, or ``None`` when none does.
        level_names: The configured priority levels' names (mandatory ones included).
        problems: Where problems are recorded.

    Returns:
        The rejection status of every level, and the levels that override it (sorted by name).
    """
    if reader is None:
        return DEFAULT_REJECTION_STATUS, ()
    return _server_and_levels(
        reader,
        ("rejectionStatus", "priorityLevelRejectionStatus"),
        lambda fields, key: fields.integer(key),
        REJECTION_STATUSES,
        tuple(str(status) for status in REJECTION_STATUSES),
        DEFAULT_REJECTION_STATUS,
        level_names,
        problems,
    )


def _server_and_levels(
    reader: Reader,
    keys: tuple[str, str],
    read: Callable[[Reader, str], _V | None],
    allowed: Collection[_V],
    shown: Sequence[str],
    default: _V,
    level_names: set[str],
    problems: Problems,
) -> tuple[_V, tuple[tuple[str, _V], ...]]:
    """A server-wide setting (``keys[0]``) and its overrides by level name (``keys[1]``)."""
    key, by_level_key = keys
    value = read(reader, key)
    if value is None:
        value = default
    elif value not in allowed:
        problems.not_supported(key, value, shown)
    overrides = reader.mapping(by_level_key, None)
    if overrides is None:
        return value, ()
    by_level: dict[str, _V] = {}
    for name in overrides.raw:
        if not isinstance(name, str):
            problems.wrong_type(overrides.path, name, "level names must be strings")
            continue
        level_value = read(overrides, name)
        if level_value is None:
            continue
        path = overrides.child_path(name)
        if level_value not in allowed:
            problems.not_supported(path, level_value, shown)
        elif name not in level_names:
            problems.not_found(path, name, "no priority level of this name")
        else:
            by_level[name] = level_value
    return value, tuple(sorted(by_level.items()))
