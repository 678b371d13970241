"""A verb- and subject-indexed form of ordered flow schemas, for the classification fast path.

Matching a schema means: any rule whose subjects match the user and one of whose request rules
(of the request's kind) matches the request. :class:`MatchIndex` flattens the rules of all
schemas, in matching order, into numbered entries, and builds one table per verb named in the
configuration (plus one for every other verb) holding only the request rules that accept that
verb -- so a scan needs no verb checks.

Subjects are indexed too: each table maps user names, group names and service-account prefixes
to bitmasks of the entries they match (bit i = entry i), and keeps the mask of entries with a
``"*"`` subject. A request ORs together the masks of its user and groups; then only the
candidate entries are tried, lowest bit (earliest entry) first. The cost therefore depends on
the few entries whose subjects match, not on the number of schemas. For non-resource requests
the URL rules of an entry left after the verb filter merge into one set of exact URLs and one
tuple of prefixes, a single test.

The semantics are those of :mod:`apf_limiter.engine._rules`, whose matchers this module reuses
to compile each rule; tests check the two agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

from apf_limiter._digest import RequestDigest
from apf_limiter.config._model import FlowSchema
from apf_limiter.engine._rules import (
    SERVICE_ACCOUNT_USERNAME_PREFIX,
    NonResourceRuleMatcher,
    ResourceRuleMatcher,
    SubjectMatcher,
)

T = TypeVar("T")

# (api_groups, resources, namespaces, cluster_scope); None sets match every value.
_ResourceCheck = tuple[frozenset[str] | None, frozenset[str] | None, frozenset[str] | None, bool]


class _Table(Generic[T]):
    """The entries that accept one verb, with their subjects indexed as bitmasks."""

    __slots__ = ("entries", "groups", "match_all", "service_accounts", "users")

    def __init__(self, entries: Sequence[tuple[SubjectMatcher, T]]) -> None:
        self.entries: tuple[T, ...] = tuple(entry for _, entry in entries)
        self.match_all = 0
        self.users: dict[str, int] = {}
        self.groups: dict[str, int] = {}
        service_accounts: dict[str, int] = {}
        for index, (subjects, _) in enumerate(entries):
            bit = 1 << index
            if subjects.match_all:
                self.match_all |= bit
            for user in subjects.users:
                self.users[user] = self.users.get(user, 0) | bit
            for group in subjects.groups:
                self.groups[group] = self.groups.get(group, 0) | bit
            for prefix in subjects.service_account_prefixes:
                service_accounts[prefix] = service_accounts.get(prefix, 0) | bit
        self.service_accounts: tuple[tuple[str, int], ...] = tuple(service_accounts.items())

    def candidates(self, user: str, groups: Sequence[str]) -> int:
        """The bitmask of entries whose subjects match the user."""
        mask = self.match_all | self.users.get(user, 0)
        group_masks = self.groups
        if group_masks:
            for group in groups:
                mask |= group_masks.get(group, 0)
        if self.service_accounts and user.startswith(SERVICE_ACCOUNT_USERNAME_PREFIX):
            for prefix, bits in self.service_accounts:
                if user.startswith(prefix):
                    mask |= bits
        return mask


def _accepting(verb: str | None, verbs: frozenset[str] | None) -> bool:
    """Whether a rule's verbs accept ``verb`` (``None``: a verb no rule names)."""
    return verbs is None or (verb is not None and verb in verbs)


def _named_verbs(verb_sets: Iterable[frozenset[str] | None]) -> list[str]:
    named: dict[str, None] = {}
    for verbs in verb_sets:
        if verbs is not None:
            named.update(dict.fromkeys(sorted(verbs)))
    return list(named)


def _url_entry(
    target: T, rules: Sequence[NonResourceRuleMatcher]
) -> tuple[T, frozenset[str] | None, tuple[str, ...]]:
    """``(target, exact URLs or None for every path, URL prefixes)``."""
    if any(r.match_all_urls for r in rules):
        return (target, None, ())
    urls = frozenset().union(*(r.urls for r in rules))
    prefixes = tuple(dict.fromkeys(p for r in rules for p in r.url_prefixes))
    return (target, urls, prefixes)


def _resource_entry(
    target: T, rules: Sequence[ResourceRuleMatcher]
) -> tuple[T, tuple[_ResourceCheck, ...] | None]:
    """``(target, resource checks or None for every resource request)``."""
    checks = tuple((r.api_groups, r.resources, r.namespaces, r.cluster_scope) for r in rules)
    return (target, None) if (None, None, None, True) in checks else (target, checks)


_Compiled = tuple[T, SubjectMatcher, list[ResourceRuleMatcher], list[NonResourceRuleMatcher]]


class MatchIndex(Generic[T]):
    """Finds the first of an ordered list of flow schemas that matches a request.

    Args:
        flow_schemas: ``(schema, target)`` pairs in matching order; :meth:`find` returns the
            target of the first matching schema.
    """

    __slots__ = ("_non_resource", "_non_resource_other", "_resource", "_resource_other")

    def __init__(self, flow_schemas: Sequence[tuple[FlowSchema, T]]) -> None:
        compiled: list[_Compiled[T]] = [
            (
                target,
                SubjectMatcher(rule.subjects),
                [ResourceRuleMatcher(r) for r in rule.resource_rules],
                [NonResourceRuleMatcher(r) for r in rule.non_resource_rules],
            )
            for schema, target in flow_schemas
            for rule in schema.rules
        ]

        def url_table(
            verb: str | None,
        ) -> _Table[tuple[T, frozenset[str] | None, tuple[str, ...]]]:
            entries = []
            for target, subjects, _, non_resource_rules in compiled:
                rules = [r for r in non_resource_rules if _accepting(verb, r.verbs)]
                if rules:
                    entries.append((subjects, _url_entry(target, rules)))
            return _Table(entries)

        def resource_table(
            verb: str | None,
        ) -> _Table[tuple[T, tuple[_ResourceCheck, ...] | None]]:
            entries = []
            for target, subjects, resource_rules, _ in compiled:
                rules = [r for r in resource_rules if _accepting(verb, r.verbs)]
                if rules:
                    entries.append((subjects, _resource_entry(target, rules)))
            return _Table(entries)

        self._non_resource = {
            verb: url_table(verb) for verb in _named_verbs(r.verbs for c in compiled for r in c[3])
        }
        self._non_resource_other = url_table(None)
        self._resource = {
            verb: resource_table(verb)
            for verb in _named_verbs(r.verbs for c in compiled for r in c[2])
        }
        self._resource_other = resource_table(None)

    def find(self, digest: RequestDigest) -> T | None:
        """Return the target of the first schema matching the request.

        Args:
            digest: The request.

        Returns:
            The target, or ``None`` if no schema matches.
        """
        if not digest.resource:
            table = self._non_resource.get(digest.verb, self._non_resource_other)
            mask = table.candidates(digest.user, digest.groups)
            path = digest.path
            entries = table.entries
            while mask:
                low = mask & -mask
                target, urls, url_prefixes = entries[low.bit_length() - 1]
                if urls is None or path in urls or path.startswith(url_prefixes):
                    return target
                mask ^= low
            return None
        resource_table = self._resource.get(digest.verb, self._resource_other)
        mask = resource_table.candidates(digest.user, digest.groups)
        subresource = digest.subresource
        key = f"{digest.resource}/{subresource}" if subresource else digest.resource
        api_group = digest.api_group
        namespace = digest.namespace
        resource_entries = resource_table.entries
        while mask:
            low = mask & -mask
            target, checks = resource_entries[low.bit_length() - 1]
            if checks is None:
                return target
            for api_groups, resources, namespaces, cluster_scope in checks:
                if (
                    (resources is None or key in resources)
                    and (api_groups is None or api_group in api_groups)
                    # "*" in namespaces does not cover requests without a namespace.
                    and (
                        (namespaces is None or namespace in namespaces)
                        if namespace
                        else cluster_scope
                    )
                ):
                    return target
            mask ^= low
        return None
