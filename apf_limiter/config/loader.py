"""Loading a :class:`Configuration` from dicts, YAML/JSON files and Kubernetes manifests.

Loading is all-or-nothing: every document is parsed and every object validated (Kubernetes'
rules plus the checks a whole file needs: duplicate names and references to missing levels), and
either a new, complete :class:`Configuration` is returned or a :class:`ConfigError` lists *all*
problems, each with its field path. Mandatory ``exempt`` and ``catch-all`` objects that are not
given are added (a missing ``exempt`` first, a missing ``catch-all`` last); the others keep the
order in which they were given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TypeVar

from apf_limiter.config.build import build_flow_schema, build_priority_level
from apf_limiter.config.defaults import (
    CATCH_ALL,
    EXEMPT,
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
)
from apf_limiter.config.documents import collect
from apf_limiter.config.draft import FlowSchemaDraft, PriorityLevelDraft
from apf_limiter.config.model import Configuration, FlowSchema, PriorityLevel
from apf_limiter.config.names import is_dns1123_subdomain
from apf_limiter.config.parse_levels import parse_priority_level
from apf_limiter.config.parse_schemas import parse_flow_schema
from apf_limiter.config.problems import Problems, closest, index, join
from apf_limiter.config.reader import Reader
from apf_limiter.config.validate_schemas import validate_flow_schema
from apf_limiter.config.validation import validate_priority_level
from apf_limiter.config.yamlio import parse_documents, read_documents
from apf_limiter.errors import ConfigError

__all__ = [
    "ConfigSource",
    "DEFAULT_SERVER_CONCURRENCY_LIMIT",
    "DEFAULT_REQUEST_WAIT_LIMIT",
    "DEFAULT_BORROWING_PERIOD",
    "MAX_REQUEST_WAIT_LIMIT",
    "MIN_BORROWING_PERIOD",
    "load_config",
    "load_config_text",
    "load_documents",
]

ConfigSource = (
    Configuration | Mapping[str, object] | Sequence[Mapping[str, object]] | str | os.PathLike[str]
)

DEFAULT_SERVER_CONCURRENCY_LIMIT = 600
DEFAULT_REQUEST_WAIT_LIMIT = 15.0
DEFAULT_BORROWING_PERIOD = 10.0
#: Kubernetes caps any queue wait at one minute.
MAX_REQUEST_WAIT_LIMIT = 60.0
#: Kubernetes adjusts every 10 s; far shorter periods only burn CPU (a subnormal one broke the
#: schedule's arithmetic), so a millisecond is the floor.
MIN_BORROWING_PERIOD = 0.001


def load_config(source: ConfigSource) -> Configuration:
    """Load and validate a configuration.

    Args:
        source: A :class:`Configuration` (returned unchanged); a mapping (our configuration
            shape, a single Kubernetes object or a ``kind: List``); a list of such documents; or
            the path of a ``.yaml``/``.yml`` (possibly multi-document) or ``.json`` file.

    Returns:
        A new, validated configuration, mandatory objects included.

    Raises:
        ConfigError: With every problem found; nothing of a bad configuration is used.
        TypeError: If ``source`` is none of the above.
    """
    if isinstance(source, Configuration):
        return source
    if isinstance(source, str | os.PathLike):
        return load_documents(read_documents(source))
    if isinstance(source, Mapping):
        return load_documents([source])
    if isinstance(source, list | tuple):
        return load_documents(list(source))
    raise TypeError(
        "load_config() takes a Configuration, a mapping, a list of mappings or a file path, "
        f"not {type(source).__name__}"
    )


def load_config_text(text: str, *, format: str = "yaml") -> Configuration:
    """Load and validate a configuration from YAML (possibly multi-document) or JSON text.

    Raises:
        ConfigError: If the text cannot be parsed or the configuration is invalid.
        ValueError: If ``format`` is not ``"yaml"`` or ``"json"``.
    """
    return load_documents(parse_documents(text, format))


def load_documents(documents: Sequence[object]) -> Configuration:
    """Load and validate a configuration from already-parsed documents.

    Raises:
        ConfigError: With every problem found.
    """
    problems = Problems()
    collected = collect(documents, problems)
    settings = _read_settings(collected.settings, problems)
    level_drafts = _check_levels(collected.levels, problems)
    level_names = {draft.name for draft in level_drafts if draft.name} | {EXEMPT, CATCH_ALL}
    schema_drafts = _check_schemas(collected.schemas, level_names, problems)
    if problems:
        raise ConfigError(problems.items)
    server_limit, wait_limit, period = settings
    schemas = [build_flow_schema(d) for d in schema_drafts]
    return Configuration(
        server_concurrency_limit=server_limit,
        request_wait_limit=wait_limit,
        borrowing_period=period,
        priority_levels=_with_mandatory(
            [build_priority_level(d) for d in level_drafts], MANDATORY_PRIORITY_LEVELS
        ),
        flow_schemas=_with_mandatory(schemas, MANDATORY_FLOW_SCHEMAS),
        imagined_flow_schemas=tuple(m.name for m in _missing(schemas, MANDATORY_FLOW_SCHEMAS)),
    )


def _read_settings(reader: Reader | None, problems: Problems) -> tuple[int, float, float]:
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


def _check_levels(entries: list[object], problems: Problems) -> list[PriorityLevelDraft]:
    drafts: list[PriorityLevelDraft] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            problems.wrong_type(index("priorityLevels", position), entry, "must be a mapping")
            continue
        draft = parse_priority_level(entry, position, problems, taken=seen)
        validate_priority_level(draft, problems)
        _check_duplicate(draft.name, draft.paths.entry, seen, problems)
        drafts.append(draft)
    return drafts


def _check_schemas(
    entries: list[object], level_names: set[str], problems: Problems
) -> list[FlowSchemaDraft]:
    drafts: list[FlowSchemaDraft] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            problems.wrong_type(index("flowSchemas", position), entry, "must be a mapping")
            continue
        draft = parse_flow_schema(entry, position, problems, taken=seen)
        validate_flow_schema(draft, problems)
        _check_duplicate(draft.name, draft.paths.entry, seen, problems)
        _check_reference(draft, level_names, problems)
        drafts.append(draft)
    return drafts


def _check_duplicate(name: str, path: str, seen: set[str], problems: Problems) -> None:
    if not name:
        return
    if name in seen:
        problems.duplicate(path, name)
    seen.add(name)


def _check_reference(draft: FlowSchemaDraft, level_names: set[str], problems: Problems) -> None:
    level = draft.priority_level
    if not level or level in level_names or not is_dns1123_subdomain(level):
        return
    detail = "no priority level has this name"
    suggestion = closest(level, sorted(level_names))
    if suggestion is not None:
        detail += f' (did you mean "{suggestion}"?)'
    problems.not_found(join(draft.paths.spec, "priorityLevelConfiguration.name"), level, detail)


_Entry = TypeVar("_Entry", PriorityLevel, FlowSchema)


def _missing(given: list[_Entry], mandatory: tuple[_Entry, ...]) -> list[_Entry]:
    """The mandatory objects that ``given`` lacks (Kubernetes "imagines" them)."""
    names = {item.name for item in given}
    return [m for m in mandatory if m.name not in names]


def _with_mandatory(given: list[_Entry], mandatory: tuple[_Entry, ...]) -> tuple[_Entry, ...]:
    missing = _missing(given, mandatory)
    first = [m for m in missing if m.name == EXEMPT]
    last = [m for m in missing if m.name == CATCH_ALL]
    return tuple(first + given + last)
