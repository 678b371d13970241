"""Validation of flow schemas, mirroring Kubernetes' rules and messages exactly.

The checks and their order are those of Kubernetes' ``ValidateFlowSchema``: object name, the
spec (matching precedence, distinguisher, level reference, rules with subjects, resource and
non-resource rules), the mandatory objects' fixed specs, then status conditions.

Two deliberate deviations (documented in docs/configuration.md):

* D2: distinguisher types ``ByClientIP`` and ``ByHeader`` (with its ``header``) are supported.
* D4: non-resource rules also accept the HTTP methods ``head``, ``post``, ``put``, ``options``,
  ``connect`` and ``trace`` as verbs, because every HTTP request is a non-resource request whose
  verb is its lower-case method.
"""

from __future__ import annotations

from functools import cache

from apf_limiter.config.defaults import EXEMPT, MANDATORY_FLOW_SCHEMAS
from apf_limiter.config.draft import (
    DistinguisherDraft,
    FlowSchemaDraft,
    NonResourceRuleDraft,
    ResourceRuleDraft,
    RuleDraft,
    SubjectDraft,
)
from apf_limiter.config.dump import dump_flow_schema
from apf_limiter.config.model import DISTINGUISHER_TYPES, SUBJECT_KINDS
from apf_limiter.config.names import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    http_token_errors,
)
from apf_limiter.config.parse_schemas import parse_flow_schema
from apf_limiter.config.problems import Problems, index, join
from apf_limiter.config.validation import validate_conditions, validate_name

__all__ = [
    "MAX_MATCHING_PRECEDENCE",
    "RESOURCE_VERBS",
    "NON_RESOURCE_VERBS",
    "non_resource_url_error",
    "validate_flow_schema",
]

MAX_MATCHING_PRECEDENCE = 10000
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


def validate_flow_schema(draft: FlowSchemaDraft, problems: Problems) -> None:
    """Check one flow schema draft, recording every problem found."""
    validate_name(draft.name, draft.paths.name, problems)
    spec = draft.paths.spec
    precedence = draft.matching_precedence
    precedence_path = join(spec, "matchingPrecedence")
    if precedence <= 0:
        problems.invalid(precedence_path, precedence, "must be a positive value")
    if precedence > MAX_MATCHING_PRECEDENCE:
        problems.invalid(
            precedence_path, precedence, f"must not be greater than {MAX_MATCHING_PRECEDENCE}"
        )
    if precedence == 1 and draft.name != EXEMPT:
        problems.invalid(
            precedence_path,
            precedence,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        )
    if draft.distinguisher is not None:
        _validate_distinguisher(draft.distinguisher, join(spec, "distinguisherMethod"), problems)
    level_path = join(spec, "priorityLevelConfiguration.name")
    if draft.priority_level:
        for message in dns1123_subdomain_errors(draft.priority_level):
            problems.invalid(level_path, draft.priority_level, message)
    else:
        problems.required(level_path, "must reference a priority level")
    for i, rule in enumerate(draft.rules):
        _validate_rule(rule, index(join(spec, "rules"), i), problems)
    _validate_mandatory(draft, problems)
    validate_conditions(draft.condition_types, draft.paths.status, problems)


def _validate_distinguisher(method: DistinguisherDraft, path: str, problems: Problems) -> None:
    if method.type not in DISTINGUISHER_TYPES:
        problems.not_supported(join(path, "type"), method.type, DISTINGUISHER_TYPES)
    header_path = join(path, "header")
    if method.type == "ByHeader":
        if not method.header:
            problems.required(header_path, "must be set when type is 'ByHeader'")
        else:
            for message in http_token_errors(method.header):
                problems.invalid(header_path, method.header, message)
    elif method.header:
        problems.forbidden(header_path, "must be empty unless type is 'ByHeader'")


def _validate_rule(rule: RuleDraft, path: str, problems: Problems) -> None:
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
    for values, field, noun in (
        (rule.api_groups, "apiGroups", "api group"),
        (rule.resources, "resources", "resource"),
    ):
        field_path = join(path, field)
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


@cache
def _fixed_drafts() -> dict[str, FlowSchemaDraft]:
    return {
        schema.name: parse_flow_schema(dump_flow_schema(schema), i, Problems())
        for i, schema in enumerate(MANDATORY_FLOW_SCHEMAS)
    }


def _spec_of(draft: FlowSchemaDraft) -> tuple[object, ...]:
    return (draft.matching_precedence, draft.priority_level, draft.distinguisher, draft.rules)


def _validate_mandatory(draft: FlowSchemaDraft, problems: Problems) -> None:
    fixed = _fixed_drafts().get(draft.name)
    if fixed is not None and draft.clean and _spec_of(draft) != _spec_of(fixed):
        problems.invalid_omitted(
            draft.paths.spec, f"spec of '{draft.name}' must equal the fixed value"
        )
