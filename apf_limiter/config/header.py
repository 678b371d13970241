"""The part common to levels and schemas: full Kubernetes object or short form, name, paths.

An entry is a *full object* when it has any of ``apiVersion``, ``kind``, ``metadata``, ``spec``
or ``status``; otherwise it is the *short form* ``{name, <spec fields>}``. The header of an entry
decides its field paths: ``<collection>[<name>]`` when the name is a valid object name, else
``<collection>[<position>]``, followed by ``spec.``/``metadata.``/``status.`` for a full object.
In ``metadata`` only ``name`` and ``annotations`` are read, and in ``status`` only the
conditions' types: everything else there (uid, managedFields, ...) is ignored, so that
``kubectl get -o yaml`` output loads as-is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from apf_limiter.config.draft import EntryPaths
from apf_limiter.config.names import is_dns1123_subdomain
from apf_limiter.config.problems import Problems, RawMapping, index, join
from apf_limiter.config.reader import Reader

__all__ = [
    "API_GROUP",
    "API_VERSIONS",
    "OBJECT_KEYS",
    "PRESERVE_ZERO_SHARES_ANNOTATION",
    "Header",
    "is_full_object",
    "read_header",
]

API_GROUP = "flowcontrol.apiserver.k8s.io"
#: apiVersion -> version name, for every version of the API group we read.
API_VERSIONS: Mapping[str, str] = {
    f"{API_GROUP}/{version}": version for version in ("v1", "v1beta1", "v1beta2", "v1beta3")
}
OBJECT_KEYS: tuple[str, ...] = ("apiVersion", "kind", "metadata", "spec", "status")
PRESERVE_ZERO_SHARES_ANNOTATION = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"

_EMPTY: RawMapping = {}


@dataclass(slots=True)
class Header:
    """What the header of an entry says.

    Attributes:
        name: The entry's name (``""`` when missing or not a string).
        paths: The field paths of its parts.
        version: ``"short"`` or the API version (``"v1"``, ``"v1beta3"``, ...).
        annotations: The keys of ``metadata.annotations``.
        spec: Reader of the spec fields (the entry itself in the short form).
        conditions: The ``type`` of each ``status.conditions`` entry.
    """

    name: str
    paths: EntryPaths
    version: str
    annotations: frozenset[str]
    spec: Reader
    conditions: list[str]


def is_full_object(raw: RawMapping) -> bool:
    """Whether ``raw`` is a full Kubernetes object rather than the short form."""
    return any(key in raw for key in OBJECT_KEYS)


def _raw_name(raw: RawMapping, full: bool) -> object:
    if not full:
        return raw.get("name")
    metadata = raw.get("metadata")
    return metadata.get("name") if isinstance(metadata, Mapping) else None


def read_header(
    raw: RawMapping,
    *,
    collection: str,
    kind: str,
    position: int,
    spec_keys: Sequence[str],
    problems: Problems,
    taken: AbstractSet[str] = frozenset(),
) -> Header:
    """Read the header of one level or schema entry, reporting its problems.

    Args:
        raw: The entry as written.
        collection: ``"priorityLevels"`` or ``"flowSchemas"``.
        kind: The Kubernetes kind the entry must have if it is a full object.
        position: The entry's position among all entries of the collection.
        spec_keys: The fields a spec may have (in the short form, beside ``name``).
        problems: Where problems are recorded.
        taken: Names of the earlier entries: an entry repeating one is named by its position,
            so that its problems are told apart from (not hidden by) the first one's.
    """
    full = is_full_object(raw)
    raw_name = _raw_name(raw, full)
    named = isinstance(raw_name, str) and is_dns1123_subdomain(raw_name) and raw_name not in taken
    entry = index(collection, raw_name if named and isinstance(raw_name, str) else position)
    if not full:
        reader = Reader(raw, entry, problems, ("name", *spec_keys))
        name = reader.string("name") or ""
        paths = EntryPaths(entry, join(entry, "name"), entry, "", "")
        return Header(name, paths, "short", frozenset(), reader, [])

    reader = Reader(raw, entry, problems, OBJECT_KEYS)
    paths = EntryPaths(
        entry,
        join(entry, "metadata.name"),
        join(entry, "spec"),
        join(entry, "status"),
        join(entry, "metadata.annotations"),
    )
    version = _read_version(reader, kind, problems)
    name = ""
    annotations: frozenset[str] = frozenset()
    metadata = reader.mapping("metadata", None)
    if metadata is not None:
        name = metadata.string("name") or ""
        annotation_reader = metadata.mapping("annotations", None)
        if annotation_reader is not None:
            annotations = frozenset(str(key) for key in annotation_reader.raw)
    spec = reader.mapping("spec", spec_keys)
    if spec is None:
        spec = Reader(_EMPTY, paths.spec, problems)
    return Header(name, paths, version, annotations, spec, _read_conditions(reader))


def _read_version(reader: Reader, kind: str, problems: Problems) -> str:
    api_version = reader.string("apiVersion")
    version = "v1"
    if api_version is None:
        if not reader.has("apiVersion"):
            problems.required(reader.child_path("apiVersion"))
    elif api_version in API_VERSIONS:
        version = API_VERSIONS[api_version]
    else:
        problems.not_supported(reader.child_path("apiVersion"), api_version, sorted(API_VERSIONS))
    written_kind = reader.string("kind")
    if written_kind is None:
        if not reader.has("kind"):
            problems.required(reader.child_path("kind"))
    elif written_kind != kind:
        problems.not_supported(reader.child_path("kind"), written_kind, [kind])
    return version


def _read_conditions(reader: Reader) -> list[str]:
    status = reader.mapping("status", None)
    if status is None:
        return []
    return [condition.string("type") or "" for condition in status.mappings("conditions", None)]
