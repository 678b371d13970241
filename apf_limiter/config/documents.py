"""Sorting configuration documents into settings, priority level entries and flow schema entries.

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
what a path shows when an entry has no usable name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apf_limiter.config.problems import Problems, RawMapping, go_value, index, join
from apf_limiter.config.reader import Reader

__all__ = ["SETTINGS_KEYS", "OBJECT_KINDS", "LIST_KINDS", "Collected", "collect"]

SETTINGS_KEYS: tuple[str, ...] = (
    "serverConcurrencyLimit",
    "requestWaitLimit",
    "borrowingPeriod",
    "priorityLevels",
    "flowSchemas",
)
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


@dataclass(slots=True)
class Collected:
    """The documents' content, sorted by what it configures.

    Attributes:
        settings: Reader of the one document in our shape, if any.
        levels: Every priority level entry, as written (not necessarily a mapping).
        schemas: Every flow schema entry, as written.
    """

    settings: Reader | None = None
    levels: list[object] = field(default_factory=list)
    schemas: list[object] = field(default_factory=list)


def collect(documents: Sequence[object], problems: Problems) -> Collected:
    """Sort ``documents`` into settings and entries, reporting structural problems."""
    collected = Collected()
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
    document: RawMapping, where: str, collected: Collected, problems: Problems
) -> None:
    if collected.settings is not None:
        problems.forbidden(
            where,
            "at most one document may hold apf_limiter settings (" + ", ".join(SETTINGS_KEYS) + ")",
        )
        return
    # Settings are addressed by their bare names, whichever document holds them.
    reader = Reader(document, "", problems, SETTINGS_KEYS)
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
    document: RawMapping, where: str, collected: Collected, problems: Problems
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
    collected: Collected,
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
