"""Serialising a :class:`Configuration` back to the configuration shape (camelCase dicts).

In private code "serialize" names this, and "dump" only the engine's read view
(``Limiter.dump()``); the public :func:`dump_config` keeps its name.

``load_config(dump_config(config)) == config`` for every configuration the loader produces, in
both forms: ``"short"`` writes each level and schema as ``{name, <spec fields>}``, and
``"kubernetes"`` as a full ``flowcontrol.apiserver.k8s.io/v1`` object. Every field is written
explicitly (no reliance on defaults), except what Kubernetes itself omits when empty:
``clusterScope: false``, empty ``namespaces``/rule lists, a nil ``borrowingLimitPercent`` and a
nil distinguisher.
"""

from __future__ import annotations

from apf_limiter.config._adaptive import serialize_adaptive
from apf_limiter.config._envelope import API_GROUP
from apf_limiter.config._model import (
    Configuration,
    FlowSchema,
    PolicyRulesWithSubjects,
    PriorityLevel,
    Subject,
)
from apf_limiter.config._settings import DEFAULT_REJECTION_STATUS

FORMS: tuple[str, ...] = ("short", "kubernetes")
_API_VERSION = f"{API_GROUP}/v1"


def dump_config(config: Configuration, *, form: str = "short") -> dict[str, object]:
    """Return ``config`` in the configuration shape.

    Args:
        config: The configuration to serialise.
        form: ``"short"`` for ``{name, <spec fields>}`` entries, ``"kubernetes"`` for full v1
            objects with ``apiVersion``/``kind``/``metadata``/``spec``.

    Raises:
        ValueError: If ``form`` is not one of :data:`FORMS`.
    """
    _check_form(form)
    return {
        "serverConcurrencyLimit": config.server_concurrency_limit,
        "requestWaitLimit": config.request_wait_limit,
        "borrowingPeriod": config.borrowing_period,
        **_enforcement(config),
        "priorityLevels": [
            serialize_priority_level(level, form=form) for level in config.priority_levels
        ],
        # Mandatory schemas the configuration did not give stay out: loading adds them again.
        "flowSchemas": [
            serialize_flow_schema(schema, form=form)
            for schema in config.flow_schemas
            if schema.name not in config.imagined_flow_schemas
        ],
    }


def _enforcement(config: Configuration) -> dict[str, object]:
    """The enforcement settings, left out where they are the default (as Kubernetes does)."""
    settings: dict[str, object] = {}
    if config.enforcement != "Enforce":
        settings["enforcement"] = config.enforcement
    if config.priority_level_enforcement:
        settings["priorityLevelEnforcement"] = dict(config.priority_level_enforcement)
    if config.rejection_status != DEFAULT_REJECTION_STATUS:
        settings["rejectionStatus"] = config.rejection_status
    if config.priority_level_rejection_status:
        settings["priorityLevelRejectionStatus"] = dict(config.priority_level_rejection_status)
    if config.adaptive_concurrency is not None:
        settings["adaptiveConcurrency"] = serialize_adaptive(config.adaptive_concurrency)
    return settings


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(map(repr, FORMS))}, not {form!r}")


def _entry(kind: str, name: str, spec: dict[str, object], form: str) -> dict[str, object]:
    if form == "short":
        return {"name": name, **spec}
    return {"apiVersion": _API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def serialize_priority_level(level: PriorityLevel, *, form: str = "short") -> dict[str, object]:
    """Return one priority level as a short-form entry or a full v1 object."""
    _check_form(form)
    spec: dict[str, object] = {"type": level.type}
    if level.exempt is not None:
        spec["exempt"] = {
            "nominalConcurrencyShares": level.exempt.nominal_concurrency_shares,
            "lendablePercent": level.exempt.lendable_percent,
        }
    if level.limited is not None:
        limited = level.limited
        response: dict[str, object] = {"type": limited.limit_response.type}
        queuing = limited.limit_response.queuing
        if limited.limit_response.type == "Queue" and queuing is not None:
            response["queuing"] = {
                "queues": queuing.queues,
                "handSize": queuing.hand_size,
                "queueLengthLimit": queuing.queue_length_limit,
            }
        limited_dict: dict[str, object] = {
            "nominalConcurrencyShares": limited.nominal_concurrency_shares,
            "lendablePercent": limited.lendable_percent,
        }
        if limited.borrowing_limit_percent is not None:
            limited_dict["borrowingLimitPercent"] = limited.borrowing_limit_percent
        limited_dict["limitResponse"] = response
        spec["limited"] = limited_dict
    return _entry("PriorityLevelConfiguration", level.name, spec, form)


def serialize_flow_schema(schema: FlowSchema, *, form: str = "short") -> dict[str, object]:
    """Return one flow schema as a short-form entry or a full v1 object."""
    _check_form(form)
    spec: dict[str, object] = {
        "matchingPrecedence": schema.matching_precedence,
        "priorityLevelConfiguration": {"name": schema.priority_level},
    }
    method = schema.distinguisher_method
    if method is not None:
        method_dict: dict[str, object] = {"type": method.type}
        if method.header:
            method_dict["header"] = method.header
        spec["distinguisherMethod"] = method_dict
    spec["rules"] = [_serialize_rule(rule) for rule in schema.rules]
    return _entry("FlowSchema", schema.name, spec, form)


def _serialize_rule(rule: PolicyRulesWithSubjects) -> dict[str, object]:
    result: dict[str, object] = {"subjects": [_serialize_subject(s) for s in rule.subjects]}
    if rule.resource_rules:
        resource_rules: list[dict[str, object]] = []
        for r in rule.resource_rules:
            item: dict[str, object] = {
                "verbs": list(r.verbs),
                "apiGroups": list(r.api_groups),
                "resources": list(r.resources),
            }
            if r.cluster_scope:
                item["clusterScope"] = True
            if r.namespaces:
                item["namespaces"] = list(r.namespaces)
            resource_rules.append(item)
        result["resourceRules"] = resource_rules
    if rule.non_resource_rules:
        result["nonResourceRules"] = [
            {"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
            for r in rule.non_resource_rules
        ]
    return result


def _serialize_subject(subject: Subject) -> dict[str, object]:
    if subject.kind == "ServiceAccount":
        return {
            "kind": "ServiceAccount",
            "serviceAccount": {"namespace": subject.namespace, "name": subject.name},
        }
    part = "user" if subject.kind == "User" else "group"
    return {"kind": subject.kind, part: {"name": subject.name}}
