"""Parsing one flow schema entry into a :class:`FlowSchemaDraft`.

The flow schema is the same in every API version. Defaulting follows Kubernetes v1:
``matchingPrecedence`` 0 (or absent) -> 1000. ``distinguisherMethod.header`` is our addition
(deviation D2, for ``ByHeader``).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from apf_limiter.config.draft import (
    DistinguisherDraft,
    FlowSchemaDraft,
    NonResourceRuleDraft,
    ResourceRuleDraft,
    RuleDraft,
    ServiceAccountDraft,
    SubjectDraft,
)
from apf_limiter.config.header import read_header
from apf_limiter.config.problems import Problems, RawMapping
from apf_limiter.config.reader import Reader

__all__ = ["SCHEMA_SPEC_KEYS", "DEFAULT_MATCHING_PRECEDENCE", "parse_flow_schema"]

SCHEMA_SPEC_KEYS: tuple[str, ...] = (
    "matchingPrecedence",
    "priorityLevelConfiguration",
    "distinguisherMethod",
    "rules",
)
DEFAULT_MATCHING_PRECEDENCE = 1000

_RULE_KEYS = ("subjects", "resourceRules", "nonResourceRules")
_SUBJECT_KEYS = ("kind", "user", "group", "serviceAccount")
_RESOURCE_RULE_KEYS = ("verbs", "apiGroups", "resources", "clusterScope", "namespaces")
_NON_RESOURCE_RULE_KEYS = ("verbs", "nonResourceURLs")


def parse_flow_schema(
    raw: RawMapping, position: int, problems: Problems, taken: AbstractSet[str] = frozenset()
) -> FlowSchemaDraft:
    """Parse one ``flowSchemas`` entry (full object or short form).

    Args:
        raw: The entry as written.
        position: Its position among all flow schemas (used in paths when it has no name).
        problems: Where problems are recorded.
        taken: Names of the earlier entries (a repeated name is not used in paths).
    """
    before = len(problems)
    header = read_header(
        raw,
        collection="flowSchemas",
        kind="FlowSchema",
        position=position,
        spec_keys=SCHEMA_SPEC_KEYS,
        problems=problems,
        taken=taken,
    )
    spec = header.spec
    draft = FlowSchemaDraft(name=header.name, paths=header.paths, version=header.version)
    draft.condition_types = header.conditions
    draft.matching_precedence = spec.integer("matchingPrecedence") or DEFAULT_MATCHING_PRECEDENCE
    reference = spec.mapping("priorityLevelConfiguration", ("name",))
    if reference is not None:
        draft.priority_level = reference.string("name") or ""
    method = spec.mapping("distinguisherMethod", ("type", "header"))
    if method is not None:
        # An empty header is no header (Go's zero value), also when compared with the fixed
        # spec of a mandatory schema.
        draft.distinguisher = DistinguisherDraft(
            type=method.string("type") or "", header=method.string("header") or None
        )
    draft.rules = [_parse_rule(rule) for rule in spec.mappings("rules", _RULE_KEYS)]
    draft.clean = len(problems) == before
    return draft


def _parse_rule(rule: Reader) -> RuleDraft:
    return RuleDraft(
        subjects=[_parse_subject(s) for s in rule.mappings("subjects", _SUBJECT_KEYS)],
        resource_rules=[
            ResourceRuleDraft(
                verbs=r.strings("verbs"),
                api_groups=r.strings("apiGroups"),
                resources=r.strings("resources"),
                cluster_scope=bool(r.boolean("clusterScope")),
                namespaces=r.strings("namespaces"),
            )
            for r in rule.mappings("resourceRules", _RESOURCE_RULE_KEYS)
        ],
        non_resource_rules=[
            NonResourceRuleDraft(
                verbs=r.strings("verbs"), non_resource_urls=r.strings("nonResourceURLs")
            )
            for r in rule.mappings("nonResourceRules", _NON_RESOURCE_RULE_KEYS)
        ],
    )


def _parse_subject(subject: Reader) -> SubjectDraft:
    draft = SubjectDraft(kind=subject.string("kind") or "")
    user = subject.mapping("user", ("name",))
    if user is not None:
        draft.user = user.string("name") or ""
    group = subject.mapping("group", ("name",))
    if group is not None:
        draft.group = group.string("name") or ""
    account = subject.mapping("serviceAccount", ("namespace", "name"))
    if account is not None:
        draft.service_account = ServiceAccountDraft(
            namespace=account.string("namespace") or "", name=account.string("name") or ""
        )
    return draft
