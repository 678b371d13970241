"""Drafts: parsed but not yet validated objects, shaped like Kubernetes' internal types.

A draft holds what the user wrote after version conversion and defaulting, with Go's zero values
(``""``, ``0``, empty lists, ``None`` for nil pointers) for what is missing, so that validation
can apply the Kubernetes rules literally. Each draft also knows the field paths of its parts as
the user wrote them (with ``spec.`` for full objects, without it for the short form).
Drafts are mutable and private to the loader; only validated drafts become model objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "EntryPaths",
    "QueuingDraft",
    "LimitResponseDraft",
    "LimitedDraft",
    "ExemptDraft",
    "PriorityLevelDraft",
    "ServiceAccountDraft",
    "SubjectDraft",
    "ResourceRuleDraft",
    "NonResourceRuleDraft",
    "RuleDraft",
    "DistinguisherDraft",
    "FlowSchemaDraft",
]


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
class QueuingDraft:
    """Draft of ``limitResponse.queuing``."""

    queues: int = 0
    hand_size: int = 0
    queue_length_limit: int = 0


@dataclass(slots=True)
class LimitResponseDraft:
    """Draft of ``limited.limitResponse``."""

    type: str = ""
    queuing: QueuingDraft | None = None


@dataclass(slots=True)
class LimitedDraft:
    """Draft of ``spec.limited``; ``shares_field`` is the version's name of the shares field."""

    nominal_concurrency_shares: int = 0
    lendable_percent: int | None = None
    borrowing_limit_percent: int | None = None
    limit_response: LimitResponseDraft = field(default_factory=LimitResponseDraft)
    shares_field: str = field(default="nominalConcurrencyShares", compare=False)


@dataclass(slots=True)
class ExemptDraft:
    """Draft of ``spec.exempt``."""

    nominal_concurrency_shares: int | None = None
    lendable_percent: int | None = None


@dataclass(slots=True)
class PriorityLevelDraft:
    """Draft of a priority level.

    Attributes:
        name: The name (``""`` when missing).
        paths: Where its parts are.
        version: ``"short"``, ``"v1"``, ``"v1beta3"``, ``"v1beta2"`` or ``"v1beta1"``.
        type: ``spec.type``.
        limited: ``spec.limited``.
        exempt: ``spec.exempt``.
        condition_types: The ``type`` of each ``status.conditions`` entry.
        forbidden_annotation: Whether it carries the v1beta3 round-trip annotation although it
            is not a v1beta3 object.
        clean: Whether it parsed without problems (only then is the mandatory-spec check
            meaningful).
    """

    name: str
    paths: EntryPaths
    version: str
    type: str = ""
    limited: LimitedDraft | None = None
    exempt: ExemptDraft | None = None
    condition_types: list[str] = field(default_factory=list)
    forbidden_annotation: bool = False
    clean: bool = True


@dataclass(slots=True)
class ServiceAccountDraft:
    """Draft of ``subject.serviceAccount``."""

    namespace: str = ""
    name: str = ""


@dataclass(slots=True)
class SubjectDraft:
    """Draft of a subject; ``user``/``group`` hold the name, ``None`` when the part is absent."""

    kind: str = ""
    user: str | None = None
    group: str | None = None
    service_account: ServiceAccountDraft | None = None


@dataclass(slots=True)
class ResourceRuleDraft:
    """Draft of a resource policy rule."""

    verbs: list[str] = field(default_factory=list)
    api_groups: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    cluster_scope: bool = False
    namespaces: list[str] = field(default_factory=list)


@dataclass(slots=True)
class NonResourceRuleDraft:
    """Draft of a non-resource policy rule."""

    verbs: list[str] = field(default_factory=list)
    non_resource_urls: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RuleDraft:
    """Draft of a policy rule with subjects."""

    subjects: list[SubjectDraft] = field(default_factory=list)
    resource_rules: list[ResourceRuleDraft] = field(default_factory=list)
    non_resource_rules: list[NonResourceRuleDraft] = field(default_factory=list)


@dataclass(slots=True)
class DistinguisherDraft:
    """Draft of ``spec.distinguisherMethod``; ``header`` is ``None`` when absent."""

    type: str = ""
    header: str | None = None


@dataclass(slots=True)
class FlowSchemaDraft:
    """Draft of a flow schema (see :class:`PriorityLevelDraft` for the common attributes).

    Attributes:
        matching_precedence: ``spec.matchingPrecedence`` (after defaulting).
        priority_level: ``spec.priorityLevelConfiguration.name``.
        distinguisher: ``spec.distinguisherMethod``.
        rules: ``spec.rules``.
    """

    name: str
    paths: EntryPaths
    version: str
    matching_precedence: int = 0
    priority_level: str = ""
    distinguisher: DistinguisherDraft | None = None
    rules: list[RuleDraft] = field(default_factory=list)
    condition_types: list[str] = field(default_factory=list)
    clean: bool = True
