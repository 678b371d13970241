"""Loading a :class:`Configuration` from its sources: objects, dicts, files, YAML/JSON text.

A source is a sequence of documents (one per YAML document, or the items of a list given in
code). Each document is one of:

* our shape: a mapping without ``kind`` holding the settings (``serverConcurrencyLimit``,
  ``requestWaitLimit``, ``borrowingPeriod``) and the ``priorityLevels``/``flowSchemas`` lists;
  at most one document may be in this shape;
* a single Kubernetes object (``kind: PriorityLevelConfiguration`` or ``FlowSchema``);
* a list of objects: ``kind: List`` (what ``kubectl get ... -o yaml`` prints), or a typed
  ``PriorityLevelConfigurationList``/``FlowSchemaList`` whose items may omit ``kind`` and
  ``apiVersion``.

Entries keep the order in which they appear; their position among all levels (or schemas) is
what a path shows when an entry has no usable name. Loading is all-or-nothing: every document is
parsed and every object validated (Kubernetes' rules plus the checks a whole file needs:
duplicate names and references to missing levels), and either a new, complete
:class:`Configuration` is returned or a :class:`ConfigError` lists *all* problems, each with its
field path. Mandatory ``exempt`` and ``catch-all`` objects that are not given are added (a
missing ``exempt`` first, a missing ``catch-all`` last); the others keep the order in which they
were given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from apf_limiter._errors import ConfigError, ConfigProblem
from apf_limiter.config._adaptive import read_adaptive
from apf_limiter.config._defaults import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    default_configuration,
)
from apf_limiter.config._fields import Reader
from apf_limiter.config._levels import (
    PriorityLevelDraft,
    build_priority_level,
    parse_priority_level,
    validate_priority_level,
)
from apf_limiter.config._model import Configuration, FlowSchema, PriorityLevel
from apf_limiter.config._names import CATCH_ALL, EXEMPT, is_dns1123_subdomain
from apf_limiter.config._problems import Problems, RawMapping, closest, go_value, index, join
from apf_limiter.config._schemas import (
    FlowSchemaDraft,
    build_flow_schema,
    parse_flow_schema,
    validate_flow_schema,
)
from apf_limiter.config._settings import (
    DEFAULT_MAX_FILE_SIZE,
    SETTING_KEYS,
    check_max_file_size,
    read_enforcement,
    read_rejection_status,
    read_settings,
)
from apf_limiter.config._text import (
    NO_TEXT_DOCUMENT,
    parse_documents,
    parse_file,
    read_documents,
)

#: What :func:`load_config` accepts: the one definition of a configuration source.
ConfigSource = (
    Configuration | Mapping[str, object] | Sequence[Mapping[str, object]] | str | os.PathLike[str]
)

#: The keys of the document in our shape.
DOCUMENT_KEYS: tuple[str, ...] = (*SETTING_KEYS, "priorityLevels", "flowSchemas")
_LEVEL_KIND = "PriorityLevelConfiguration"
_SCHEMA_KIND = "FlowSchema"
OBJECT_KINDS: tuple[str, ...] = (_SCHEMA_KIND, _LEVEL_KIND)
#: List kinds -> the kind their items have when they omit it.
LIST_KINDS: Mapping[str, str | None] = {
    "List": None,
    f"{_LEVEL_KIND}List": _LEVEL_KIND,
    f"{_SCHEMA_KIND}List": _SCHEMA_KIND,
}
_LIST_KEYS = ("apiVersion", "kind", "metadata", "items")
# A document with one of these keys is an object (or a list) even when it lacks `kind`.
_OBJECT_ONLY_KEYS = ("apiVersion", "metadata", "spec", "status", "items")


def load_source(config: ConfigSource | None) -> Configuration:
    """Load ``config``, or return the built-in default configuration when it is ``None``.

    What the limiter and the command line call; :func:`load_config` is looked up at each call.

    Raises:
        ConfigError: With every problem found.
        TypeError: If ``config`` is not a :data:`ConfigSource`.
    """
    if config is None:
        return default_configuration()
    return load_config(config)


def load_config(
    source: ConfigSource, *, max_file_size: int = DEFAULT_MAX_FILE_SIZE
) -> Configuration:
    """Load and validate a configuration.

    Args:
        source: A :class:`Configuration` (returned unchanged); a mapping (our configuration
            shape, a single Kubernetes object or a ``kind: List``); a list of such documents; or
            the path of a ``.yaml``/``.yml`` (possibly multi-document) or ``.json`` file.
        max_file_size: For a path: the largest file read, in bytes (4 MiB by default). Only
            regular files are read (or symbolic links to one): a directory, a named pipe or a
            device is refused without being read.

    Returns:
        A new, validated configuration, mandatory objects included. An empty mapping (``{}``,
        also as a file's content) is a deliberately empty configuration: the default settings
        and the mandatory objects.

    Raises:
        ConfigError: With every problem found; nothing of a bad configuration is used. A file
            that holds no document (empty, or only comments, ``---`` or ``null``) is refused:
            it is most often one caught half-written.
        TypeError: If ``source`` is none of the above.
        ValueError: If ``max_file_size`` is not a positive integer.
    """
    check_max_file_size(max_file_size)
    if isinstance(source, Configuration):
        return source
    if isinstance(source, str | os.PathLike):
        return load_documents(read_documents(source, max_file_size))
    if isinstance(source, Mapping):
        return load_documents([source])
    if isinstance(source, list | tuple):
        return load_documents(list(source))
    raise TypeError(
        "load_config() takes a Configuration, a mapping, a list of mappings or a file path, "
        f"not {type(source).__name__}"
    )


def load_file_content(data: bytes, name: str) -> Configuration:
    """Load and validate a configuration from a file's content (what a reload read).

    Args:
        data: The file's bytes (UTF-8).
        name: The file's name: its suffix gives the format; it is the path of file problems.

    Raises:
        ConfigError: As :func:`load_config` does for the file.
    """
    return load_documents(parse_file(data, name))


def load_config_text(text: str, *, format: str = "yaml") -> Configuration:
    """Load and validate a configuration from YAML (possibly multi-document) or JSON text.

    Text that holds no document (empty, or only comments) is refused, as a file is: the
    empty configuration is written ``{}``.

    Raises:
        ConfigError: If the text cannot be parsed, holds no document, or the configuration
            is invalid.
        ValueError: If ``format`` is not ``"yaml"`` or ``"json"``.
    """
    documents = parse_documents(text, format)
    if all(document is None for document in documents):
        raise ConfigError([ConfigProblem("", NO_TEXT_DOCUMENT)])
    return load_documents(documents)


def load_documents(documents: Sequence[object]) -> Configuration:
    """Load and validate a configuration from already-parsed documents.

    Raises:
        ConfigError: With every problem found.
    """
    problems = Problems()
    collected = _collect(documents, problems)
    settings = read_settings(collected.settings, problems)
    builtin = default_configuration() if _settings_only(collected) else None
    level_drafts = _check_levels(collected.levels, problems)
    level_names = {draft.name for draft in level_drafts if draft.name} | {EXEMPT, CATCH_ALL}
    if builtin is not None:
        level_names = {level.name for level in builtin.priority_levels}
    schema_drafts = _check_schemas(collected.schemas, level_names, problems)
    enforcement, overrides = read_enforcement(collected.settings, level_names, problems)
    rejection_status, statuses = read_rejection_status(collected.settings, level_names, problems)
    adaptive = read_adaptive(collected.settings, problems)
    if problems:
        raise ConfigError(problems.items)
    server_limit, wait_limit, period = settings
    if builtin is not None:
        return replace(
            builtin,
            server_concurrency_limit=server_limit,
            request_wait_limit=wait_limit,
            borrowing_period=period,
            enforcement=enforcement,
            priority_level_enforcement=overrides,
            rejection_status=rejection_status,
            priority_level_rejection_status=statuses,
            adaptive_concurrency=adaptive,
        )
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
        enforcement=enforcement,
        priority_level_enforcement=overrides,
        rejection_status=rejection_status,
        priority_level_rejection_status=statuses,
        adaptive_concurrency=adaptive,
    )


def _settings_only(collected: _Collected) -> bool:
    """Whether the documents give settings but no levels and no schemas, not even empty lists.

    Then the built-in web-app levels and schemas apply, with those settings:
    ``serverConcurrencyLimit: 50`` alone used to drop every level, so all traffic went to
    catch-all, without queues or fairness, and the probes were no longer exempt. Explicit
    empty lists still mean no levels (only the mandatory ``exempt`` and ``catch-all``).
    """
    settings = collected.settings
    return (
        settings is not None
        and bool(settings.raw)
        and not collected.levels
        and not collected.schemas
        and "priorityLevels" not in settings.raw
        and "flowSchemas" not in settings.raw
    )


@dataclass(slots=True)
class _Collected:
    """The documents' content, sorted by what it configures.

    Attributes:
        settings: Reader of the one document in our shape, if any.
        levels: Every priority level entry, as written (not necessarily a mapping).
        schemas: Every flow schema entry, as written.
    """

    settings: Reader | None = None
    levels: list[object] = field(default_factory=list)
    schemas: list[object] = field(default_factory=list)


def _collect(documents: Sequence[object], problems: Problems) -> _Collected:
    """Sort ``documents`` into settings and entries, reporting structural problems."""
    collected = _Collected()
    several = len(documents) > 1
    for i, document in enumerate(documents):
        where = index("documents", i) if several else ""
        if document is None:
            continue
        if not isinstance(document, Mapping):
            problems.wrong_type(where, document, "must be a mapping")
            continue
        kind = document.get("kind")
        if kind is None and not any(key in document for key in _OBJECT_ONLY_KEYS):
            _collect_settings(document, where, collected, problems)
        elif isinstance(kind, str) and kind in LIST_KINDS:
            _collect_list(document, where, collected, problems)
        else:
            _collect_object(document, None, where, collected, problems)
    return collected


def _collect_settings(
    document: RawMapping, where: str, collected: _Collected, problems: Problems
) -> None:
    if collected.settings is not None:
        problems.forbidden(
            where,
            "at most one document may hold apf_limiter settings (" + ", ".join(DOCUMENT_KEYS) + ")",
        )
        return
    # Settings are addressed by their bare names, whichever document holds them.
    reader = Reader(document, "", problems, DOCUMENT_KEYS)
    collected.settings = reader
    for key, entries in (("priorityLevels", collected.levels), ("flowSchemas", collected.schemas)):
        value = reader.get(key)
        if value is None:
            continue
        if isinstance(value, str) or not isinstance(value, Sequence):
            # Reported without marking the path bad: objects from other documents are
            # addressed under it too (priorityLevels[<name>]) and keep their own problems.
            problems.add(key, f"Invalid value: {go_value(value)}: must be a list")
            continue
        entries.extend(value)


def _collect_list(
    document: RawMapping, where: str, collected: _Collected, problems: Problems
) -> None:
    reader = Reader(document, where, problems, _LIST_KEYS)
    implied_kind = LIST_KINDS[str(document.get("kind"))]
    api_version = document.get("apiVersion")
    items = reader.get("items")
    if items is None:
        return
    items_path = reader.child_path("items")
    if isinstance(items, str) or not isinstance(items, Sequence):
        problems.wrong_type(items_path, items, "must be a list")
        return
    for i, item in enumerate(items):
        item_path = index(items_path, i)
        if not isinstance(item, Mapping):
            problems.wrong_type(item_path, item, "must be a mapping")
            continue
        if implied_kind is not None:
            # Typed lists from the API leave kind and apiVersion to the list.
            item = {"kind": implied_kind, "apiVersion": api_version, **item}
        _collect_object(item, implied_kind, item_path, collected, problems)


def _collect_object(
    item: RawMapping,
    implied_kind: str | None,
    where: str,
    collected: _Collected,
    problems: Problems,
) -> None:
    kind = item.get("kind", implied_kind)
    kind_path = join(where, "kind")
    if kind == _LEVEL_KIND:
        collected.levels.append(item)
    elif kind == _SCHEMA_KIND:
        collected.schemas.append(item)
    elif kind is None:
        problems.required(kind_path, "must be one of " + ", ".join(f'"{k}"' for k in OBJECT_KINDS))
    elif not isinstance(kind, str):
        problems.wrong_type(kind_path, kind, "must be a string")
    else:
        problems.not_supported(kind_path, kind, OBJECT_KINDS)


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
