"""Flow-schema rules, precompiled for the classification fast path.

The semantics are those of Kubernetes (``match.go``, ``matchesFlowSchema`` and friends): a schema
matches iff any of its rules matches; a rule matches iff one of its subjects matches the user
AND, for a resource request, one of its resource rules matches (for a non-resource request, one
of its non-resource rules). Each configured rule is turned once into the frozensets, URL prefixes
and wildcard flags here, which :mod:`._match_index` indexes, so that matching a request allocates
nothing (except the ``resource/subresource`` key of a subresource request).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from apf_limiter.config._model import (
    NonResourcePolicyRule,
    ResourcePolicyRule,
    Subject,
)

SERVICE_ACCOUNT_USERNAME_PREFIX: Final = "system:serviceaccount:"
_WILDCARD: Final = "*"


def literal_values(values: Sequence[str]) -> frozenset[str] | None:
    """Return the set to look values up in, or ``None`` when every value matches.

    Kubernetes honours ``"*"`` only when it is the list's only element; anywhere else (which
    validation forbids) it is compared literally, and so it is here.

    Args:
        values: A rule's ``verbs``, ``apiGroups``, ``resources`` or ``namespaces``.

    Returns:
        ``None`` for ``["*"]``, else the values as a frozenset.
    """
    if len(values) == 1 and values[0] == _WILDCARD:
        return None
    return frozenset(values)


def url_prefix(pattern: str) -> str:
    """The prefix a ``nonResourceURLs`` pattern matches below.

    Args:
        pattern: The configured URL pattern.

    Returns:
        The pattern without one trailing ``*``, ending in ``/``.
    """
    prefix = pattern.removesuffix(_WILDCARD)
    return prefix if prefix.endswith("/") else prefix + "/"


def non_resource_url_matches(pattern: str, path: str) -> bool:
    """Whether one ``nonResourceURLs`` pattern matches a request path (the Kubernetes algorithm).

    ``"*"`` and an equal path match; otherwise one trailing ``*`` is removed, a ``/`` is appended
    unless already there, and the path must start with the result. So ``/healthz`` matches
    ``/healthz/etcd`` but not ``/healthzfoo``, ``/healthz/*`` does not match ``/healthz``, and
    ``/`` matches every path.

    Args:
        pattern: The configured URL pattern.
        path: The request path.

    Returns:
        True if the pattern matches the path.
    """
    return pattern in (_WILDCARD, path) or path.startswith(url_prefix(pattern))


class SubjectMatcher:
    """Matches a user against the ``subjects`` of one rule.

    Service accounts are matched on the user name: a named one is just another user name
    (``system:serviceaccount:<namespace>:<name>``), and ``name: "*"`` becomes the prefix
    ``system:serviceaccount:<namespace>:``. A subject of an unknown kind matches nobody.

    Attributes:
        match_all: A ``User`` or ``Group`` subject named ``"*"`` is present.
        users: User names (service accounts included) that match.
        groups: Group names of which any matches.
        service_account_prefixes: User-name prefixes of ``ServiceAccount`` subjects named ``*``.
    """

    __slots__ = ("groups", "match_all", "service_account_prefixes", "users")

    def __init__(self, subjects: Sequence[Subject]) -> None:
        users: set[str] = set()
        groups: set[str] = set()
        prefixes: list[str] = []
        match_all = False
        for subject in subjects:
            if subject.kind == "User":
                match_all |= subject.name == _WILDCARD
                users.add(subject.name)
            elif subject.kind == "Group":
                # "*" matches any user, even one without groups.
                match_all |= subject.name == _WILDCARD
                groups.add(subject.name)
            elif subject.kind == "ServiceAccount":
                namespaced = f"{SERVICE_ACCOUNT_USERNAME_PREFIX}{subject.namespace}:"
                if subject.name == _WILDCARD:
                    prefixes.append(namespaced)
                else:
                    users.add(namespaced + subject.name)
        self.match_all: bool = match_all
        self.users: frozenset[str] = frozenset(users)
        self.groups: frozenset[str] = frozenset(groups)
        self.service_account_prefixes: tuple[str, ...] = tuple(prefixes)


class ResourceRuleMatcher:
    """A compiled ``ResourcePolicyRule``; ``None`` sets mean "every value".

    Attributes:
        verbs: Matching verbs, or ``None`` for all.
        api_groups: Matching API groups, or ``None`` for all.
        resources: Matching ``resource`` / ``resource/subresource`` keys, or ``None`` for all.
        namespaces: Matching namespaces, or ``None`` for every (non-empty) namespace.
        cluster_scope: Whether requests without a namespace match.
        matches_everything: This rule matches every resource request.
    """

    __slots__ = (
        "api_groups",
        "cluster_scope",
        "matches_everything",
        "namespaces",
        "resources",
        "verbs",
    )

    def __init__(self, rule: ResourcePolicyRule) -> None:
        self.verbs = literal_values(rule.verbs)
        self.api_groups = literal_values(rule.api_groups)
        self.resources = literal_values(rule.resources)
        self.namespaces = literal_values(rule.namespaces)
        self.cluster_scope = rule.cluster_scope
        self.matches_everything = (
            self.verbs is None
            and self.api_groups is None
            and self.resources is None
            and self.namespaces is None
            and self.cluster_scope
        )


class NonResourceRuleMatcher:
    """A compiled ``NonResourcePolicyRule``.

    Attributes:
        verbs: Matching verbs, or ``None`` for all.
        match_all_urls: Some pattern is ``"*"``.
        urls: The patterns, for the exact-equality test.
        url_prefixes: The prefix each pattern matches below (see :func:`non_resource_url_matches`).
        matches_everything: This rule matches every non-resource request.
    """

    __slots__ = ("match_all_urls", "matches_everything", "url_prefixes", "urls", "verbs")

    def __init__(self, rule: NonResourcePolicyRule) -> None:
        self.verbs = literal_values(rule.verbs)
        self.match_all_urls: bool = _WILDCARD in rule.non_resource_urls
        self.urls: frozenset[str] = frozenset(rule.non_resource_urls)
        self.url_prefixes: tuple[str, ...] = tuple(
            dict.fromkeys(url_prefix(p) for p in rule.non_resource_urls)
        )
        self.matches_everything: bool = self.verbs is None and self.match_all_urls
