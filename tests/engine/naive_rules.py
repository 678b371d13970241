"""Kubernetes' rule matching (``match.go``) read literally: the reference the indexed
classifier is checked against."""

from __future__ import annotations

from apf_limiter._digest import RequestDigest
from apf_limiter.config._model import PolicyRulesWithSubjects, Subject


def naive_rule_matches(rule: PolicyRulesWithSubjects, d: RequestDigest) -> bool:
    """match.go read literally, without any of the classifier's indexing."""

    def listed(value: str, values: tuple[str, ...]) -> bool:
        return values == ("*",) or value in values

    def subject(s: Subject) -> bool:
        if s.kind == "User":
            return s.name in ("*", d.user)
        if s.kind == "Group":
            return s.name == "*" or s.name in d.groups
        prefix = f"system:serviceaccount:{s.namespace}:"
        return d.user.startswith(prefix) if s.name == "*" else d.user == prefix + s.name

    def url(p: str) -> bool:
        if p in ("*", d.path):
            return True
        prefix = p[:-1] if p.endswith("*") else p
        return d.path.startswith(prefix if prefix.endswith("/") else prefix + "/")

    if not any(subject(s) for s in rule.subjects):
        return False
    if d.is_resource_request:
        key = f"{d.resource}/{d.subresource}" if d.subresource else d.resource
        return any(
            listed(d.verb, r.verbs)
            and listed(key, r.resources)
            and listed(d.api_group, r.api_groups)
            and (listed(d.namespace, r.namespaces) if d.namespace else r.cluster_scope)
            for r in rule.resource_rules
        )
    return any(
        listed(d.verb, r.verbs) and any(url(p) for p in r.non_resource_urls)
        for r in rule.non_resource_rules
    )
