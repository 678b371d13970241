"""The Kubernetes object envelope of a level or schema entry: read and check it.

An entry is a *full object* when it has any of ``apiVersion``, ``kind``, ``metadata``, ``spec``
or ``status``; otherwise it is the *short form* ``{name, <spec fields>}``. The envelope of an
entry decides its field paths: ``<collection>[<name>]`` when the name is a valid object name, else
``<collection>[<position>]``, followed by ``spec.``/``metadata.``/``status.`` for a full object.
In ``metadata`` only ``name`` and ``annotations`` are read, and in ``status`` only the
conditions' types: everything else there (uid, managedFields, ...) is ignored, so that
``kubectl get -o yaml`` output loads as-is. The checks of the name and of the status conditions
(Kubernetes' ``ValidateObjectMeta`` and the conditions part of its flow-control validation) are
here too, shared by levels and schemas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from apf_limiter.config._fields import Reader
from apf_limiter.config._names import dns1123_subdomain_errors, is_dns1123_subdomain
from apf_limiter.config._problems import Problems, RawMapping, index, join

API_GROUP = "flowcontrol.apiserver.k8s.io"
#: apiVersion -> version name, for every version of the API group we read.
API_VERSIONS: Mapping[str, str] = {
    f"{API_GROUP}/{version}": version for version in ("v1", "v1beta1", "v1beta2", "v1beta3")
}
OBJECT_KEYS: tuple[str, ...] = ("apiVersion", "kind", "metadata", "spec", "status")

_EMPTY: RawMapping = {}


@dataclass(slots=True)
class EntryPaths:
    """Where the parts of one level or schema entry are.

    Attributes:
        entry: The entry itself, e.g. ``priorityLevels[workload-high]``.
        name: Its name (``…metadata.name``, or ``…name`` in the short form).
        spec: The base of spec fields (``…spec``, or the entry in the short form).
        status: The base of status fields (``…status``; the short form has none).
        annotations: The object's annotations (``…metadata.annotations``).
    """

    entry: str
    name: str
    spec: str
    status: str
    annotations: str


@dataclass(slots=True)
class EntryDraft:
    """What the draft of every level or schema entry holds of its envelope.

    Attributes:
        name: The name (``""`` when missing).
        paths: Where its parts are.
        version: ``"short"``, ``"v1"``, ``"v1beta3"``, ``"v1beta2"`` or ``"v1beta1"``.
        condition_types: The ``type`` of each ``status.conditions`` entry.
        clean: Whether it parsed without problems (only then is the mandatory-spec check
            meaningful).
    """

    name: str
    paths: EntryPaths
    version: str
    condition_types: list[str] = field(default_factory=list)
    clean: bool = True


@dataclass(slots=True)
class Envelope:
    """What the envelope of an entry says.

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


def read_envelope(
    raw: RawMapping,
    *,
    collection: str,
    kind: str,
    position: int,
    spec_keys: Sequence[str],
    problems: Problems,
    taken: AbstractSet[str] = frozenset(),
) -> Envelope:
    """Read the envelope of one level or schema entry, reporting its problems.

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
        return Envelope(name, paths, "short", frozenset(), reader, [])

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
    return Envelope(name, paths, version, annotations, spec, _read_conditions(reader))


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


def validate_name(name: str, path: str, problems: Problems) -> None:
    """Check an object name: required, and a DNS-1123 subdomain."""
    if not name:
        problems.required(path, "name or generateName is required")
        return
    for message in dns1123_subdomain_errors(name):
        problems.invalid(path, name, message)


def validate_conditions(condition_types: list[str], status_path: str, problems: Problems) -> None:
    """Check ``status.conditions``: each type non-empty and unique."""
    seen: set[str] = set()
    for i, condition_type in enumerate(condition_types):
        type_path = join(index(join(status_path, "conditions"), i), "type")
        if condition_type in seen:
            problems.duplicate(type_path, condition_type)
        seen.add(condition_type)
        if not condition_type:
            problems.required(type_path, "must not be empty")
