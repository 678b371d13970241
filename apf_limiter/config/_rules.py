"""The rules of a flow schema: subjects, resource and non-resource rules.

Each rule is parsed into a draft, checked with Kubernetes' rules and messages (those of the
rules part of ``ValidateFlowSchema``, in its order), then built. Building drops the parts of a
subject that do not belong to its kind (the checks forbid them anyway). Deviation D4 (documented
in docs/configuration.md): non-resource rules also accept the HTTP methods ``head``, ``post``,
``put``, ``options``, ``connect`` and ``trace`` as verbs, because every HTTP request is a
non-resource request whose verb is its lower-case method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from apf_limiter.config._fields import Reader
from apf_limiter.config._model import (
    SUBJECT_KINDS,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)
from apf_limiter.config._names import dns1123_label_errors, dns1123_subdomain_errors
from apf_limiter.config._problems import Problems, index, join

#: The verbs Kubernetes supports in rules.
RESOURCE_VERBS: frozenset[str] = frozenset(
    ("get", "list", "create", "update", "delete", "deletecollection", "patch", "watch", "proxy")
)
#: Deviation D4: HTTP methods are non-resource verbs too.
NON_RESOURCE_VERBS: frozenset[str] = RESOURCE_VERBS | {
    "head",
    "post",
    "put",
    "options",
    "connect",
    "trace",
}
_NAMESPACE_INTRO = "each member of this list must be '*' or a DNS-1123 label; "

_RULE_KEYS = ("subjects", "resourceRules", "nonResourceRules")
_SUBJECT_KEYS = ("kind", "user", "group", "serviceAccount")
_RESOURCE_RULE_KEYS = ("verbs", "apiGroups", "resources", "clusterScope", "namespaces")
_NON_RESOURCE_RULE_KEYS = ("verbs", "nonResourceURLs")


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


def parse_rules(spec: Reader) -> list[RuleDraft]:
    """Parse the ``rules`` of a flow schema's spec (empty when absent)."""
    return [_parse_rule(rule) for rule in spec.mappings("rules", _RULE_KEYS)]


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


def validate_rule(rule: RuleDraft, path: str, problems: Problems) -> None:
    """Check one rule of a flow schema (its subjects, resource and non-resource rules)."""
    if rule.subjects:
        for i, subject in enumerate(rule.subjects):
            _validate_subject(subject, index(join(path, "subjects"), i), problems)
    else:
        problems.required(join(path, "subjects"), "subjects must contain at least one value")
    if not rule.resource_rules and not rule.non_resource_rules:
        problems.required(
            path, "at least one of resourceRules and nonResourceRules has to be non-empty"
        )
    for i, resource_rule in enumerate(rule.resource_rules):
        _validate_resource_rule(resource_rule, index(join(path, "resourceRules"), i), problems)
    for i, non_resource_rule in enumerate(rule.non_resource_rules):
        _validate_non_resource_rule(
            non_resource_rule, index(join(path, "nonResourceRules"), i), problems
        )


_FORBIDDEN_USER = "user is forbidden when subject kind is not 'User'"
_FORBIDDEN_GROUP = "group is forbidden when subject kind is not 'Group'"
_FORBIDDEN_ACCOUNT = "serviceAccount is forbidden when subject kind is not 'ServiceAccount'"


def _validate_subject(subject: SubjectDraft, path: str, problems: Problems) -> None:
    user_path, group_path = join(path, "user"), join(path, "group")
    account_path = join(path, "serviceAccount")
    if subject.kind == "ServiceAccount":
        _validate_service_account(subject, account_path, problems)
        if subject.user is not None:
            problems.forbidden(user_path, _FORBIDDEN_USER)
        if subject.group is not None:
            problems.forbidden(group_path, _FORBIDDEN_GROUP)
    elif subject.kind == "User":
        _validate_named(
            subject.user, user_path, "user is required when subject kind is 'User'", problems
        )
        if subject.service_account is not None:
            problems.forbidden(account_path, _FORBIDDEN_ACCOUNT)
        if subject.group is not None:
            problems.forbidden(group_path, _FORBIDDEN_GROUP)
    elif subject.kind == "Group":
        _validate_named(
            subject.group, group_path, "group is required when subject kind is 'Group'", problems
        )
        if subject.service_account is not None:
            problems.forbidden(account_path, _FORBIDDEN_ACCOUNT)
        if subject.user is not None:
            problems.forbidden(user_path, _FORBIDDEN_USER)
    else:
        problems.not_supported(join(path, "kind"), subject.kind, SUBJECT_KINDS)


def _validate_named(name: str | None, path: str, missing: str, problems: Problems) -> None:
    if name is None:
        problems.required(path, missing)
    elif not name:
        problems.required(join(path, "name"))


def _validate_service_account(subject: SubjectDraft, path: str, problems: Problems) -> None:
    account = subject.service_account
    if account is None:
        problems.required(path, "serviceAccount is required when subject kind is 'ServiceAccount'")
        return
    name_path = join(path, "name")
    if not account.name:
        problems.required(name_path)
    elif account.name != "*":
        for message in dns1123_subdomain_errors(account.name):
            problems.invalid(name_path, account.name, message)
    namespace_path = join(path, "namespace")
    if account.namespace:
        for message in dns1123_label_errors(account.namespace):
            problems.invalid(namespace_path, account.namespace, message)
    else:
        problems.required(namespace_path, "must specify namespace for service account")


def _validate_verbs(
    verbs: list[str], supported: frozenset[str], path: str, problems: Problems
) -> None:
    if not verbs:
        problems.required(path, "verbs must contain at least one value")
    elif "*" in verbs:
        if len(verbs) > 1:
            problems.invalid(path, verbs, "if '*' is present, must not specify other verbs")
    elif not supported.issuperset(verbs):
        problems.not_supported(path, verbs, sorted(supported))


def _validate_resource_rule(rule: ResourceRuleDraft, path: str, problems: Problems) -> None:
    _validate_verbs(rule.verbs, RESOURCE_VERBS, join(path, "verbs"), problems)
    for values, key, noun in (
        (rule.api_groups, "apiGroups", "api group"),
        (rule.resources, "resources", "resource"),
    ):
        field_path = join(path, key)
        if not values:
            problems.required(field_path, f"resource rules must supply at least one {noun}")
        elif len(values) > 1 and "*" in values:
            problems.invalid(
                field_path, values, f"if '*' is present, must not specify other {noun}s"
            )
    namespaces_path = join(path, "namespaces")
    if not rule.namespaces and not rule.cluster_scope:
        # A clusterScope of the wrong type says nothing about whether namespaces are needed.
        if problems.is_bad(join(path, "clusterScope")):
            return
        problems.required(
            namespaces_path,
            "resource rules that are not cluster scoped must supply at least one namespace",
        )
    elif "*" in rule.namespaces:
        if len(rule.namespaces) > 1:
            problems.invalid(
                namespaces_path,
                rule.namespaces,
                "if '*' is present, must not specify other namespaces",
            )
    else:
        for i, namespace in enumerate(rule.namespaces):
            for message in dns1123_label_errors(namespace):
                problems.invalid(index(namespaces_path, i), namespace, _NAMESPACE_INTRO + message)


def non_resource_url_error(url: str) -> str | None:
    """Return Kubernetes' complaint about one non-resource URL pattern, or ``None`` if valid."""
    if not url:
        return "must not be empty"
    if url == "/":
        return None
    if not url.startswith("/"):
        return "must start with slash"
    if " " in url:
        return "must not contain white-space"
    if "//" in url:
        return "must not contain double slash"
    wildcards = url.count("*")
    if wildcards > 1 or (wildcards == 1 and not url.endswith("/*")):
        return "wildcard can only do suffix matching"
    return None


def _validate_non_resource_rule(rule: NonResourceRuleDraft, path: str, problems: Problems) -> None:
    _validate_verbs(rule.verbs, NON_RESOURCE_VERBS, join(path, "verbs"), problems)
    urls_path = join(path, "nonResourceURLs")
    urls = rule.non_resource_urls
    if not urls:
        problems.required(urls_path, "nonResourceURLs must contain at least one value")
    elif "*" in urls:
        if len(urls) > 1:
            problems.invalid(
                urls_path, urls, "if '*' is present, must not specify other non-resource URLs"
            )
    else:
        for i, url in enumerate(urls):
            message = non_resource_url_error(url)
            if message is not None:
                problems.invalid(index(urls_path, i), url, message)


def build_rule(rule: RuleDraft) -> PolicyRulesWithSubjects:
    """Build the model of a validated rule draft."""
    return PolicyRulesWithSubjects(
        subjects=tuple(_build_subject(subject) for subject in rule.subjects),
        resource_rules=tuple(
            ResourcePolicyRule(
                verbs=tuple(r.verbs),
                api_groups=tuple(r.api_groups),
                resources=tuple(r.resources),
                cluster_scope=r.cluster_scope,
                namespaces=tuple(r.namespaces),
            )
            for r in rule.resource_rules
        ),
        non_resource_rules=tuple(
            NonResourcePolicyRule(
                verbs=tuple(r.verbs), non_resource_urls=tuple(r.non_resource_urls)
            )
            for r in rule.non_resource_rules
        ),
    )


def _build_subject(subject: SubjectDraft) -> Subject:
    kind = cast(SubjectKind, subject.kind)
    if subject.kind == "ServiceAccount" and subject.service_account is not None:
        account = subject.service_account
        return Subject(kind=kind, name=account.name, namespace=account.namespace)
    if subject.kind == "User":
        return Subject(kind=kind, name=subject.user or "")
    return Subject(kind=kind, name=subject.group or "")
