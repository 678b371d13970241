"""Frozen, typed dataclasses for the APF configuration.

The shapes follow the Kubernetes ``flowcontrol.apiserver.k8s.io/v1`` objects, with field names in
snake_case. Instances are produced by :func:`apf_limiter.load_config` (which validates them) or
built directly in code; runtime objects are derived from them and never write back into them.
Defaults are the Kubernetes v1 defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from apf_limiter.config._settings import (
    DEFAULT_ADAPTIVE_ALGORITHM,
    DEFAULT_BORROWING_PERIOD,
    DEFAULT_ENFORCEMENT,
    DEFAULT_REJECTION_STATUS,
    DEFAULT_REQUEST_WAIT_LIMIT,
    DEFAULT_SERVER_CONCURRENCY_LIMIT,
)

PriorityLevelType = Literal["Exempt", "Limited"]
LimitResponseType = Literal["Queue", "Reject"]
SubjectKind = Literal["User", "Group", "ServiceAccount"]
DistinguisherType = Literal["ByUser", "ByNamespace", "ByClientIP", "ByHeader"]

PRIORITY_LEVEL_TYPES: tuple[str, ...] = ("Exempt", "Limited")
LIMIT_RESPONSE_TYPES: tuple[str, ...] = ("Queue", "Reject")
SUBJECT_KINDS: tuple[str, ...] = ("Group", "ServiceAccount", "User")
DISTINGUISHER_TYPES: tuple[str, ...] = ("ByClientIP", "ByHeader", "ByNamespace", "ByUser")


@dataclass(frozen=True, slots=True)
class QueuingConfiguration:
    """Queuing parameters of a ``Queue``-type limited level.

    Attributes:
        queues: Number of queues (the shuffle-sharding deck size).
        hand_size: Queues dealt to each flow (the hand size).
        queue_length_limit: Requests a queue may hold before arrivals are rejected.
    """

    queues: int = 64
    hand_size: int = 8
    queue_length_limit: int = 50


@dataclass(frozen=True, slots=True)
class LimitResponse:
    """What a limited level does with a request that cannot run at once.

    Attributes:
        type: ``"Queue"`` to hold it in fair queues, ``"Reject"`` to reject it at once.
        queuing: The queuing parameters; required for ``Queue``, absent for ``Reject``.
    """

    type: LimitResponseType = "Queue"
    queuing: QueuingConfiguration | None = field(default_factory=QueuingConfiguration)


@dataclass(frozen=True, slots=True)
class LimitedPriorityLevelConfiguration:
    """The ``limited`` part of a priority level.

    Attributes:
        nominal_concurrency_shares: Shares of the server limit (NCS); 0 makes a "jail" level.
        lendable_percent: Percent of the nominal limit other levels may borrow (0..100).
        borrowing_limit_percent: Percent of the nominal limit this level may borrow on top;
            ``None`` means unlimited (bounded by the server limit).
        limit_response: Queue or reject when the level is full.
    """

    nominal_concurrency_shares: int = 30
    lendable_percent: int = 0
    borrowing_limit_percent: int | None = None
    limit_response: LimitResponse = field(default_factory=LimitResponse)


@dataclass(frozen=True, slots=True)
class ExemptPriorityLevelConfiguration:
    """The ``exempt`` part of the exempt priority level.

    Attributes:
        nominal_concurrency_shares: Shares counted in the share sum (not enforced).
        lendable_percent: Percent of the nominal limit other levels may borrow.
    """

    nominal_concurrency_shares: int = 0
    lendable_percent: int = 0


@dataclass(frozen=True, slots=True)
class PriorityLevel:
    """A priority level (Kubernetes ``PriorityLevelConfiguration``).

    Attributes:
        name: The level's name (a DNS subdomain).
        type: ``"Exempt"`` (only the level named ``exempt``) or ``"Limited"``.
        limited: The limited parameters; set iff ``type == "Limited"``.
        exempt: The exempt parameters; only for ``type == "Exempt"``.
    """

    name: str
    type: PriorityLevelType = "Limited"
    limited: LimitedPriorityLevelConfiguration | None = None
    exempt: ExemptPriorityLevelConfiguration | None = None

    @property
    def is_exempt(self) -> bool:
        """Whether requests of this level bypass limiting."""
        return self.type == "Exempt"

    @property
    def nominal_concurrency_shares(self) -> int:
        """The level's NCS, whichever part of the union carries it."""
        if self.limited is not None:
            return self.limited.nominal_concurrency_shares
        if self.exempt is not None:
            return self.exempt.nominal_concurrency_shares
        return 0

    @property
    def lendable_percent(self) -> int:
        """The level's lendable percent, whichever part of the union carries it."""
        if self.limited is not None:
            return self.limited.lendable_percent
        if self.exempt is not None:
            return self.exempt.lendable_percent
        return 0

    @property
    def borrowing_limit_percent(self) -> int | None:
        """The borrowing limit percent; ``None`` (unlimited) for exempt levels."""
        return self.limited.borrowing_limit_percent if self.limited is not None else None

    @property
    def queuing(self) -> QueuingConfiguration | None:
        """The queuing parameters if this is a ``Queue``-type limited level, else ``None``."""
        if self.limited is None or self.limited.limit_response.type != "Queue":
            return None
        return self.limited.limit_response.queuing


@dataclass(frozen=True, slots=True)
class Subject:
    """Who a rule applies to.

    Attributes:
        kind: ``"User"``, ``"Group"`` or ``"ServiceAccount"``.
        name: The user name, group name or service-account name (``"*"`` matches all).
        namespace: The service account's namespace (``ServiceAccount`` only).
    """

    kind: SubjectKind
    name: str
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ResourcePolicyRule:
    """Matches resource requests.

    Attributes:
        verbs: Verbs, or ``("*",)``.
        api_groups: API groups, or ``("*",)``; ``""`` is the core group.
        resources: Resources (``resource`` or ``resource/subresource``), or ``("*",)``.
        cluster_scope: Whether requests without a namespace match.
        namespaces: Namespaces, or ``("*",)`` for every namespace.
    """

    verbs: tuple[str, ...]
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    cluster_scope: bool = False
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NonResourcePolicyRule:
    """Matches non-resource requests (plain HTTP paths).

    Attributes:
        verbs: Lower-case verbs (HTTP methods), or ``("*",)``.
        non_resource_urls: Paths; ``/x`` matches ``/x`` and ``/x/...``, ``/x/*`` matches below
            ``/x/`` only, ``"*"`` matches everything.
    """

    verbs: tuple[str, ...]
    non_resource_urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PolicyRulesWithSubjects:
    """One rule of a flow schema: matching subjects and request rules.

    Attributes:
        subjects: Who the rule applies to (any of them).
        resource_rules: Rules for resource requests.
        non_resource_rules: Rules for non-resource requests.
    """

    subjects: tuple[Subject, ...]
    resource_rules: tuple[ResourcePolicyRule, ...] = ()
    non_resource_rules: tuple[NonResourcePolicyRule, ...] = ()


@dataclass(frozen=True, slots=True)
class FlowDistinguisherMethod:
    """How requests of a flow schema are split into flows.

    Attributes:
        type: ``ByUser``, ``ByNamespace``, ``ByClientIP`` or ``ByHeader``.
        header: The header name for ``ByHeader`` (lower-case).
    """

    type: DistinguisherType
    header: str = ""


@dataclass(frozen=True, slots=True)
class FlowSchema:
    """A flow schema: classifies requests into a priority level and flows.

    Attributes:
        name: The schema's name (a DNS subdomain).
        priority_level: The name of the referenced priority level.
        matching_precedence: 1..10000; lower matches first.
        distinguisher_method: How to split into flows; ``None`` puts all requests in one flow.
        rules: The schema matches if any rule matches.
    """

    name: str
    priority_level: str
    matching_precedence: int = 1000
    distinguisher_method: FlowDistinguisherMethod | None = None
    rules: tuple[PolicyRulesWithSubjects, ...] = ()


@dataclass(frozen=True, slots=True)
class AdaptiveConcurrency:
    """An adaptive server limit: ServerCL learned from execution latency (an apf_limiter setting).

    Attributes:
        min_limit: The learned limit never goes below this.
        max_limit: The learned limit never goes above this.
        initial_limit: Where learning starts; ``None``: ``serverConcurrencyLimit`` (clamped).
        algorithm: ``"Gradient"`` or ``"AIMD"``.
        update_interval: Seconds between updates of the limit (at most one change each).
        tolerance: Latency over its baseline (a ratio) still taken as healthy. The ratio
            compares a level's mean with a baseline of the same mean, so it sits at ~1 while
            the backend keeps up: 1.2 settles about 1.2 × the knee (what 1.3 did over the
            ~1.1 noise floor of the former low-percentile baseline).
        smoothing: Fraction of the way to its new target the limit moves per update
            (``Gradient``); ``AIMD`` adds ``smoothing`` × √limit when healthy.
        backoff: ``AIMD``'s multiplier when latency is over ``tolerance``.
        baseline_window: Seconds over which the evidence pooled into each level's baseline
            latency fades.
    """

    min_limit: int = 1
    max_limit: int = 1000
    initial_limit: int | None = None
    algorithm: str = DEFAULT_ADAPTIVE_ALGORITHM
    update_interval: float = 1.0
    tolerance: float = 1.2
    smoothing: float = 0.3
    backoff: float = 0.9
    baseline_window: float = 300.0

    def start_limit(self, server_concurrency_limit: int) -> int:
        """The limit learning starts from: ``initial_limit``, else ServerCL within the bounds."""
        start = server_concurrency_limit if self.initial_limit is None else self.initial_limit
        return min(max(start, self.min_limit), self.max_limit)


@dataclass(frozen=True, slots=True)
class Configuration:
    """A whole, validated APF configuration.

    Attributes:
        server_concurrency_limit: Total seats of this process (ServerCL).
        request_wait_limit: Seconds a request may wait in a queue.
        borrowing_period: Seconds between borrowing adjustments.
        priority_levels: All priority levels, mandatory ones included.
        flow_schemas: All flow schemas, mandatory ones included (in the order given).
        imagined_flow_schemas: Names of the mandatory flow schemas (``exempt``, ``catch-all``)
            that the configuration did not give and the loader added. Kubernetes tries an added
            ``exempt`` first and an added ``catch-all`` last, whatever the others' precedence;
            given ones are sorted by precedence and name like the rest.
        enforcement: ``"Enforce"`` holds and rejects requests; ``"Shadow"`` runs every
            request at once and reports what enforcing would have done (an apf_limiter
            setting; Kubernetes has no dry run).
        priority_level_enforcement: Levels whose enforcement differs from ``enforcement``,
            as ``(level name, enforcement)`` pairs sorted by name.
        rejection_status: The HTTP status of a rejection: 429 (Kubernetes') or 503 (what
            uvicorn's concurrency limit answers); an apf_limiter setting, carried on
            ``Rejected.status`` and answered by every HTTP front door.
        priority_level_rejection_status: Levels whose rejection status differs from
            ``rejection_status``, as ``(level name, status)`` pairs sorted by name.
        adaptive_concurrency: When set, ServerCL follows a limit learned from execution
            latency (an apf_limiter setting); ``None`` keeps ``server_concurrency_limit``.
    """

    server_concurrency_limit: int = DEFAULT_SERVER_CONCURRENCY_LIMIT
    request_wait_limit: float = DEFAULT_REQUEST_WAIT_LIMIT
    borrowing_period: float = DEFAULT_BORROWING_PERIOD
    priority_levels: tuple[PriorityLevel, ...] = ()
    flow_schemas: tuple[FlowSchema, ...] = ()
    imagined_flow_schemas: tuple[str, ...] = ()
    enforcement: str = DEFAULT_ENFORCEMENT
    priority_level_enforcement: tuple[tuple[str, str], ...] = ()
    rejection_status: int = DEFAULT_REJECTION_STATUS
    priority_level_rejection_status: tuple[tuple[str, int], ...] = ()
    adaptive_concurrency: AdaptiveConcurrency | None = None

    def enforcement_of(self, level_name: str) -> str:
        """The enforcement of the level named ``level_name`` (``"Enforce"`` or ``"Shadow"``)."""
        for name, enforcement in self.priority_level_enforcement:
            if name == level_name:
                return enforcement
        return self.enforcement

    def rejection_status_of(self, level_name: str) -> int:
        """The HTTP status of a rejection at the level named ``level_name`` (429 or 503)."""
        for name, status in self.priority_level_rejection_status:
            if name == level_name:
                return status
        return self.rejection_status

    def priority_level(self, name: str) -> PriorityLevel:
        """Return the level named ``name``.

        Raises:
            KeyError: If there is no such level.
        """
        for level in self.priority_levels:
            if level.name == name:
                return level
        raise KeyError(name)

    def flow_schema(self, name: str) -> FlowSchema:
        """Return the flow schema named ``name``.

        Raises:
            KeyError: If there is no such schema.
        """
        for schema in self.flow_schemas:
            if schema.name == name:
                return schema
        raise KeyError(name)
