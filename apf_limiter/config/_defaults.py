"""Built-in configurations: the mandatory objects, the web-app default, Kubernetes' bootstrap set.

* :data:`MANDATORY_PRIORITY_LEVELS` and :data:`MANDATORY_FLOW_SCHEMAS` are Kubernetes' mandatory
  ``exempt`` and ``catch-all`` objects. The loader adds them when a configuration lacks them and
  rejects given ones whose spec differs (for the ``exempt`` level, except its ``exempt`` part).
* :func:`default_configuration` is the configuration used when the user gives none: the
  mandatory objects plus levels and schemas suited to a web app (see ``docs/defaults.md`` for
  the rationale of every number).
* :func:`kubernetes_bootstrap_configuration` is Kubernetes' own mandatory + suggested set
  (upstream ``apis/flowcontrol/bootstrap/default.go``) at ServerCL 600, for checking our
  concurrency math against upstream's worked numbers.
"""

from __future__ import annotations

from apf_limiter.config._model import (
    Configuration,
    DistinguisherType,
    ExemptPriorityLevelConfiguration,
    FlowDistinguisherMethod,
    FlowSchema,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    PriorityLevel,
    QueuingConfiguration,
    ResourcePolicyRule,
    Subject,
)
from apf_limiter.config._names import CATCH_ALL, EXEMPT

_AUTHENTICATED = "system:authenticated"
_UNAUTHENTICATED = "system:unauthenticated"

_ALL_RESOURCES = ResourcePolicyRule(
    verbs=("*",), api_groups=("*",), resources=("*",), cluster_scope=True, namespaces=("*",)
)
_ALL_NON_RESOURCES = NonResourcePolicyRule(verbs=("*",), non_resource_urls=("*",))


def _groups(*names: str) -> tuple[Subject, ...]:
    return tuple(Subject(kind="Group", name=name) for name in names)


def _users(*names: str) -> tuple[Subject, ...]:
    return tuple(Subject(kind="User", name=name) for name in names)


def _kube_system_service_accounts() -> tuple[Subject, ...]:
    return (Subject(kind="ServiceAccount", name="*", namespace="kube-system"),)


def _everything(subjects: tuple[Subject, ...]) -> tuple[PolicyRulesWithSubjects, ...]:
    return (PolicyRulesWithSubjects(subjects, (_ALL_RESOURCES,), (_ALL_NON_RESOURCES,)),)


def _queuing_level(
    name: str, shares: int, lendable: int, queues: int, hand_size: int, queue_length: int
) -> PriorityLevel:
    return PriorityLevel(
        name=name,
        type="Limited",
        limited=LimitedPriorityLevelConfiguration(
            nominal_concurrency_shares=shares,
            lendable_percent=lendable,
            borrowing_limit_percent=None,
            limit_response=LimitResponse(
                type="Queue",
                queuing=QueuingConfiguration(
                    queues=queues, hand_size=hand_size, queue_length_limit=queue_length
                ),
            ),
        ),
    )


def _schema(
    name: str,
    level: str,
    precedence: int,
    distinguisher: DistinguisherType | None,
    rules: tuple[PolicyRulesWithSubjects, ...],
) -> FlowSchema:
    method = FlowDistinguisherMethod(type=distinguisher) if distinguisher else None
    return FlowSchema(
        name=name,
        priority_level=level,
        matching_precedence=precedence,
        distinguisher_method=method,
        rules=rules,
    )


#: Kubernetes' mandatory priority levels: ``exempt`` and ``catch-all``.
MANDATORY_PRIORITY_LEVELS: tuple[PriorityLevel, ...] = (
    PriorityLevel(
        name=EXEMPT,
        type="Exempt",
        exempt=ExemptPriorityLevelConfiguration(nominal_concurrency_shares=0, lendable_percent=0),
    ),
    PriorityLevel(
        name=CATCH_ALL,
        type="Limited",
        limited=LimitedPriorityLevelConfiguration(
            nominal_concurrency_shares=5,
            lendable_percent=0,
            borrowing_limit_percent=None,
            limit_response=LimitResponse(type="Reject", queuing=None),
        ),
    ),
)

#: Kubernetes' mandatory flow schemas: ``exempt`` (precedence 1) and ``catch-all`` (10000).
MANDATORY_FLOW_SCHEMAS: tuple[FlowSchema, ...] = (
    _schema(EXEMPT, EXEMPT, 1, None, _everything(_groups("system:masters"))),
    _schema(
        CATCH_ALL,
        CATCH_ALL,
        10000,
        "ByUser",
        _everything(_groups(_UNAUTHENTICATED, _AUTHENTICATED)),
    ),
)

_EXEMPT_LEVEL, _CATCH_ALL_LEVEL = MANDATORY_PRIORITY_LEVELS
_EXEMPT_SCHEMA, _CATCH_ALL_SCHEMA = MANDATORY_FLOW_SCHEMAS


def default_configuration() -> Configuration:
    """Return the built-in configuration for web apps (used when no configuration is given).

    Levels: ``exempt``; ``catch-all``; ``global-default`` (150 shares, 50% lendable, 128 queues,
    hand 6, 50 per queue) for authenticated traffic, fair per user; ``workload-low`` (90 shares,
    90% lendable, 128/6/50) for anonymous traffic, fair per client IP. Schemas, by precedence:
    ``exempt`` (1); ``probes`` (2: ``get``/``head`` of ``/healthz``, ``/readyz``, ``/livez``,
    ``/health``, ``/metrics`` and below, exempt); ``anonymous`` (9000: ``system:anonymous`` and
    ``system:unauthenticated`` -> workload-low, by client IP); ``global-default`` (9900:
    everyone else -> global-default, by user); ``catch-all`` (10000). ServerCL 600, queue wait
    limit 15 s, borrowing period 10 s.
    """
    probes = PolicyRulesWithSubjects(
        subjects=_groups("*"),
        non_resource_rules=(
            NonResourcePolicyRule(
                verbs=("get", "head"),
                non_resource_urls=("/healthz", "/readyz", "/livez", "/health", "/metrics"),
            ),
        ),
    )
    return Configuration(
        server_concurrency_limit=600,
        request_wait_limit=15.0,
        borrowing_period=10.0,
        priority_levels=(
            _EXEMPT_LEVEL,
            _CATCH_ALL_LEVEL,
            _queuing_level("global-default", 150, 50, 128, 6, 50),
            _queuing_level("workload-low", 90, 90, 128, 6, 50),
        ),
        flow_schemas=(
            _EXEMPT_SCHEMA,
            _schema("probes", EXEMPT, 2, None, (probes,)),
            _schema(
                "anonymous",
                "workload-low",
                9000,
                "ByClientIP",
                _everything(
                    (Subject(kind="User", name="system:anonymous"), *_groups(_UNAUTHENTICATED))
                ),
            ),
            _schema("global-default", "global-default", 9900, "ByUser", _everything(_groups("*"))),
            _CATCH_ALL_SCHEMA,
        ),
        # As loaded from its documented YAML (docs/defaults.md), which leaves the mandatory
        # schemas to the loader.
        imagined_flow_schemas=(EXEMPT, CATCH_ALL),
    )


def kubernetes_bootstrap_configuration() -> Configuration:
    """Return Kubernetes' mandatory and suggested objects (``bootstrap/default.go``), ServerCL 600.

    Levels are in the table's order (exempt, catch-all, system, node-high, leader-election,
    workload-high, workload-low, global-default); schemas by precedence, then name.
    """
    leader_election = PolicyRulesWithSubjects(
        subjects=(
            *_users("system:kube-controller-manager", "system:kube-scheduler"),
            *_kube_system_service_accounts(),
        ),
        resource_rules=(
            ResourcePolicyRule(
                verbs=("get", "create", "update"),
                api_groups=("coordination.k8s.io",),
                resources=("leases",),
                cluster_scope=False,
                namespaces=("*",),
            ),
        ),
    )
    node_high = PolicyRulesWithSubjects(
        subjects=_groups("system:nodes"),
        resource_rules=(
            ResourcePolicyRule(
                verbs=("*",),
                api_groups=("",),
                resources=("nodes", "nodes/status"),
                cluster_scope=True,
                namespaces=("*",),
            ),
            ResourcePolicyRule(
                verbs=("*",),
                api_groups=("coordination.k8s.io",),
                resources=("leases",),
                cluster_scope=False,
                namespaces=("*",),
            ),
        ),
    )
    probes = PolicyRulesWithSubjects(
        subjects=_groups(_UNAUTHENTICATED, _AUTHENTICATED),
        non_resource_rules=(
            NonResourcePolicyRule(
                verbs=("get",), non_resource_urls=("/healthz", "/readyz", "/livez")
            ),
        ),
    )
    return Configuration(
        server_concurrency_limit=600,
        request_wait_limit=15.0,
        borrowing_period=10.0,
        priority_levels=(
            _EXEMPT_LEVEL,
            _CATCH_ALL_LEVEL,
            _queuing_level("system", 30, 33, 64, 6, 50),
            _queuing_level("node-high", 40, 25, 64, 6, 50),
            _queuing_level("leader-election", 10, 0, 16, 4, 50),
            _queuing_level("workload-high", 40, 50, 128, 6, 50),
            _queuing_level("workload-low", 100, 90, 128, 6, 50),
            _queuing_level("global-default", 20, 50, 128, 6, 50),
        ),
        flow_schemas=(
            _EXEMPT_SCHEMA,
            _schema("probes", EXEMPT, 2, None, (probes,)),
            _schema("system-leader-election", "leader-election", 100, "ByUser", (leader_election,)),
            _schema("system-node-high", "node-high", 400, "ByUser", (node_high,)),
            _schema("system-nodes", "system", 500, "ByUser", _everything(_groups("system:nodes"))),
            _schema(
                "kube-controller-manager",
                "workload-high",
                800,
                "ByNamespace",
                _everything(_users("system:kube-controller-manager")),
            ),
            _schema(
                "kube-scheduler",
                "workload-high",
                800,
                "ByNamespace",
                _everything(_users("system:kube-scheduler")),
            ),
            _schema(
                "kube-system-service-accounts",
                "workload-high",
                900,
                "ByNamespace",
                _everything(_kube_system_service_accounts()),
            ),
            _schema(
                "service-accounts",
                "workload-low",
                9000,
                "ByUser",
                _everything(_groups("system:serviceaccounts")),
            ),
            _schema(
                "global-default",
                "global-default",
                9900,
                "ByUser",
                _everything(_groups(_UNAUTHENTICATED, _AUTHENTICATED)),
            ),
            _CATCH_ALL_SCHEMA,
        ),
    )
