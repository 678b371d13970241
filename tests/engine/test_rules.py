"""Rule matching semantics (Kubernetes match.go / match_test.go TestLiterals).

Every check goes through both the per-schema matcher (rules.py) and the Classifier's indexed
fast path (match_index.py), which must agree.
"""

from __future__ import annotations

import pytest

from apf_limiter._digest import RequestDigest
from apf_limiter.config._model import (
    FlowSchema,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
)
from apf_limiter.engine._classifier import Classifier
from apf_limiter.engine._rules import non_resource_url_matches
from tests.engine.naive_rules import naive_rule_matches

GOOD_USER = Subject("User", "goodu")


def matches(digest: RequestDigest, *rules: PolicyRulesWithSubjects) -> bool:
    """Whether a schema made of ``rules`` matches: the classifier must agree with ``match.go``."""
    schema = FlowSchema("rule", "pl", rules=rules)
    by_schema = any(naive_rule_matches(rule, digest) for rule in rules)
    # Without a catch-all schema, an unmatched request raises LookupError.
    try:
        by_classifier = Classifier([schema], hash_seed=0).classify(digest).flow_schema is schema
    except LookupError:
        by_classifier = False
    assert by_schema == by_classifier
    return by_schema


def resource_rule(
    subject: Subject = GOOD_USER,
    *,
    verbs: tuple[str, ...] = ("goodverb",),
    api_groups: tuple[str, ...] = ("goodapig",),
    resources: tuple[str, ...] = ("goodrscs",),
    namespaces: tuple[str, ...] = ("goodns",),
    cluster_scope: bool = False,
) -> PolicyRulesWithSubjects:
    return PolicyRulesWithSubjects(
        subjects=(subject,),
        resource_rules=(
            ResourcePolicyRule(verbs, api_groups, resources, cluster_scope, namespaces),
        ),
    )


def url_rule(
    subject: Subject = GOOD_USER,
    *,
    verbs: tuple[str, ...] = ("goodverb",),
    urls: tuple[str, ...] = ("/openapi/v2",),
) -> PolicyRulesWithSubjects:
    return PolicyRulesWithSubjects(
        subjects=(subject,), non_resource_rules=(NonResourcePolicyRule(verbs, urls),)
    )


GOOD_GROUPS = ("goodg1", "goodg2")
# reqRN: a namespaced resource request.
REQ_RN = RequestDigest(
    user="goodu",
    groups=GOOD_GROUPS,
    verb="goodverb",
    path="/apis/goodapig/v1/namespaces/goodns/goodrscs",
    api_group="goodapig",
    resource="goodrscs",
    namespace="goodns",
    name="eman",
)
# reqRU: the same without a namespace.
REQ_RU = RequestDigest(
    user="goodu",
    groups=GOOD_GROUPS,
    verb="goodverb",
    path="/apis/goodapig/v1/goodrscs",
    api_group="goodapig",
    resource="goodrscs",
    name="eman",
)
# reqN: a non-resource request.
REQ_N = RequestDigest(user="goodu", groups=GOOD_GROUPS, verb="goodverb", path="/openapi/v2")


# --- match_test TestLiterals ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        resource_rule(Subject("User", "goodu")),
        resource_rule(Subject("Group", "goodg1")),
        resource_rule(Subject("User", "*")),
        resource_rule(Subject("Group", "*")),
        resource_rule(verbs=("*",)),
        resource_rule(api_groups=("*",)),
        resource_rule(resources=("*",)),
        resource_rule(namespaces=("*",)),
    ],
)
def test_literals_namespaced_resource_request_matches(rule: PolicyRulesWithSubjects) -> None:
    assert matches(REQ_RN, rule)


@pytest.mark.parametrize(
    "rule",
    [
        resource_rule(Subject("User", "badu")),
        resource_rule(Subject("Group", "badg")),
        resource_rule(verbs=("badverb",)),
        resource_rule(api_groups=("badapig",)),
        resource_rule(resources=("badrscs",)),
        resource_rule(namespaces=("badns",)),
    ],
)
def test_literals_namespaced_resource_request_does_not_match(
    rule: PolicyRulesWithSubjects,
) -> None:
    assert not matches(REQ_RN, rule)


@pytest.mark.parametrize(
    "rule",
    [
        resource_rule(namespaces=(), cluster_scope=True),
        resource_rule(verbs=("*",), namespaces=(), cluster_scope=True),
        resource_rule(api_groups=("*",), namespaces=(), cluster_scope=True),
        resource_rule(resources=("*",), namespaces=(), cluster_scope=True),
    ],
)
def test_literals_cluster_scoped_request_matches(rule: PolicyRulesWithSubjects) -> None:
    assert matches(REQ_RU, rule)


@pytest.mark.parametrize(
    "rule",
    [
        resource_rule(verbs=("badverb",), namespaces=(), cluster_scope=True),
        resource_rule(api_groups=("badapig",), namespaces=(), cluster_scope=True),
        resource_rule(resources=("badrscs",), namespaces=(), cluster_scope=True),
        resource_rule(namespaces=(), cluster_scope=False),
    ],
)
def test_literals_cluster_scoped_request_does_not_match(rule: PolicyRulesWithSubjects) -> None:
    assert not matches(REQ_RU, rule)


@pytest.mark.parametrize(
    "rule",
    [
        url_rule(),
        url_rule(verbs=("*",)),
        url_rule(urls=("*",)),
    ],
)
def test_literals_non_resource_request_matches(rule: PolicyRulesWithSubjects) -> None:
    assert matches(REQ_N, rule)


@pytest.mark.parametrize(
    "rule",
    [
        url_rule(verbs=("badverb",)),
        url_rule(urls=("/closedapi/v2",)),
    ],
)
def test_literals_non_resource_request_does_not_match(rule: PolicyRulesWithSubjects) -> None:
    assert not matches(REQ_N, rule)


# --- non-resource URL patterns (match.go) --------------------------------------------------------

URL_CASES = [
    # "*" matches everything.
    ("*", "/anything/at/all", True),
    ("*", "/", True),
    # A plain pattern matches itself and everything below it as a path segment.
    ("/healthz", "/healthz", True),
    ("/healthz", "/healthz/etcd", True),
    ("/healthz", "/healthz/", True),
    ("/healthz", "/healthzfoo", False),
    ("/healthz", "/health", False),
    # A "/*" suffix matches strictly below, not the path itself.
    ("/healthz/*", "/healthz/etcd", True),
    ("/healthz/*", "/healthz/", True),
    ("/healthz/*", "/healthz/a/b", True),
    ("/healthz/*", "/healthz", False),
    ("/healthz/*", "/healthzfoo", False),
    # "/hea" and "/hea/*" do not prefix-match "/healthz".
    ("/hea", "/healthz", False),
    ("/hea/*", "/healthz", False),
    ("/hea", "/hea/x", True),
    # "/" matches every path.
    ("/", "/", True),
    ("/", "/healthz", True),
    ("/", "/a/b/c", True),
    # A trailing "/" pattern: equality or below it.
    ("/apis/", "/apis/", True),
    ("/apis/", "/apis/apps", True),
    ("/apis/", "/apis", False),
    ("/foo", "/foo/bar", True),
    ("/foo", "/fo", False),
    ("/openapi/v2", "/openapi/v2", True),
    ("/openapi/v2", "/openapi/v3", False),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), URL_CASES)
def test_non_resource_url_pattern(pattern: str, path: str, expected: bool) -> None:
    assert non_resource_url_matches(pattern, path) is expected
    digest = RequestDigest(user="goodu", verb="get", path=path)
    assert matches(digest, url_rule(verbs=("get",), urls=(pattern,))) is expected


def test_non_resource_url_any_pattern_of_the_list() -> None:
    rule = url_rule(verbs=("get",), urls=("/a", "/b/*", "/c"))
    assert matches(RequestDigest(user="goodu", path="/b/x"), rule)
    assert matches(RequestDigest(user="goodu", path="/c"), rule)
    assert not matches(RequestDigest(user="goodu", path="/b"), rule)
    assert not matches(RequestDigest(user="goodu", path="/d"), rule)


# --- subjects ------------------------------------------------------------------------------------


def test_user_subject_exact_and_wildcard() -> None:
    assert matches(REQ_N, url_rule(Subject("User", "goodu")))
    assert not matches(REQ_N, url_rule(Subject("User", "Goodu")))
    assert not matches(REQ_N, url_rule(Subject("User", "good")))
    assert matches(
        RequestDigest(user="anyone", path="/openapi/v2", verb="goodverb"),
        url_rule(Subject("User", "*")),
    )


def test_group_subject() -> None:
    no_groups = RequestDigest(user="loner", groups=(), verb="goodverb", path="/openapi/v2")
    # "*" matches any user, even one with no groups at all.
    assert matches(no_groups, url_rule(Subject("Group", "*")))
    assert not matches(no_groups, url_rule(Subject("Group", "goodg1")))
    assert matches(REQ_N, url_rule(Subject("Group", "goodg2")))
    # Group names are not user names.
    assert not matches(REQ_N, url_rule(Subject("Group", "goodu")))


def test_any_subject_of_the_list() -> None:
    rule = PolicyRulesWithSubjects(
        subjects=(Subject("User", "badu"), Subject("Group", "goodg2")),
        non_resource_rules=(NonResourcePolicyRule(("goodverb",), ("/openapi/v2",)),),
    )
    assert matches(REQ_N, rule)


SA_CASES = [
    # A named service account is its user name.
    (Subject("ServiceAccount", "builder", "ci"), "system:serviceaccount:ci:builder", True),
    (Subject("ServiceAccount", "builder", "ci"), "system:serviceaccount:ci:deployer", False),
    (Subject("ServiceAccount", "builder", "ci"), "system:serviceaccount:cd:builder", False),
    (Subject("ServiceAccount", "builder", "ci"), "system:serviceaccount:ci:builderx", False),
    (Subject("ServiceAccount", "builder", "ci"), "builder", False),
    # name "*": any name in that namespace (prefix "system:serviceaccount:<ns>:").
    (Subject("ServiceAccount", "*", "kube-system"), "system:serviceaccount:kube-system:foo", True),
    (Subject("ServiceAccount", "*", "kube-system"), "system:serviceaccount:kube-system:", True),
    (
        Subject("ServiceAccount", "*", "kube-system"),
        "system:serviceaccount:kube-systemx:foo",
        False,
    ),
    (Subject("ServiceAccount", "*", "kube-system"), "system:serviceaccount:kube-system", False),
    (Subject("ServiceAccount", "*", "kube-system"), "system:serviceaccount:default:foo", False),
    (Subject("ServiceAccount", "*", "kube-system"), "kube-system:foo", False),
]


@pytest.mark.parametrize(("subject", "user", "expected"), SA_CASES)
def test_service_account_subject(subject: Subject, user: str, expected: bool) -> None:
    digest = RequestDigest(user=user, groups=("system:serviceaccounts",), verb="get", path="/x")
    assert matches(digest, url_rule(subject, verbs=("get",), urls=("/x",))) is expected


# --- request kinds, wildcards, resources, namespaces, verbs --------------------------------------


def test_resource_request_ignores_non_resource_rules_and_vice_versa() -> None:
    everything_urls = url_rule(Subject("Group", "*"), verbs=("*",), urls=("*",))
    everything_resources = resource_rule(
        Subject("Group", "*"),
        verbs=("*",),
        api_groups=("*",),
        resources=("*",),
        namespaces=("*",),
        cluster_scope=True,
    )
    assert not matches(REQ_RN, everything_urls)
    assert not matches(REQ_RU, everything_urls)
    assert not matches(REQ_N, everything_resources)
    assert matches(REQ_RN, everything_resources)
    assert matches(REQ_N, everything_urls)


@pytest.mark.parametrize(
    ("field", "wild", "other"),
    [
        ("verbs", ("*", "goodverb"), ("*", "otherverb")),
        ("api_groups", ("*", "goodapig"), ("*", "otherapig")),
        ("resources", ("*", "goodrscs"), ("*", "otherrscs")),
        ("namespaces", ("*", "goodns"), ("*", "otherns")),
    ],
)
def test_wildcard_honoured_only_when_alone(
    field: str, wild: tuple[str, ...], other: tuple[str, ...]
) -> None:
    # With another element, "*" is compared literally: the good value still matches by name,
    # but an unlisted value does not.
    assert matches(REQ_RN, resource_rule(**{field: wild}))  # type: ignore[arg-type]
    assert not matches(REQ_RN, resource_rule(**{field: other}))  # type: ignore[arg-type]


def test_wildcard_compared_literally_in_a_longer_list() -> None:
    literal_star = RequestDigest(user="goodu", verb="*", path="/openapi/v2")
    assert matches(literal_star, url_rule(verbs=("*", "get")))
    assert not matches(
        RequestDigest(user="goodu", verb="list", path="/x"),
        url_rule(verbs=("*", "get"), urls=("/x",)),
    )


def test_resource_and_subresource() -> None:
    status = RequestDigest(
        user="goodu", verb="update", resource="pods", subresource="status", namespace="ns"
    )
    plain = RequestDigest(user="goodu", verb="update", resource="pods", namespace="ns")

    def rule(*resources: str) -> PolicyRulesWithSubjects:
        return resource_rule(
            verbs=("update",), api_groups=("",), resources=resources, namespaces=("ns",)
        )

    # The request is looked up as "resource/subresource": "pods" does not cover its status.
    assert not matches(status, rule("pods"))
    assert matches(status, rule("pods/status"))
    assert matches(status, rule("pods", "pods/status"))
    assert not matches(plain, rule("pods/status"))
    assert matches(plain, rule("pods"))
    assert matches(status, rule("*"))


def test_namespace_rules() -> None:
    def rule(namespaces: tuple[str, ...], cluster_scope: bool) -> PolicyRulesWithSubjects:
        return resource_rule(namespaces=namespaces, cluster_scope=cluster_scope)

    # "*" does not cover namespace-less requests; only clusterScope does.
    assert not matches(REQ_RU, rule(("*",), False))
    assert matches(REQ_RU, rule(("*",), True))
    # clusterScope does not cover namespaced requests.
    assert not matches(REQ_RN, rule((), True))
    assert matches(REQ_RN, rule(("goodns",), True))


def test_verbs_match_case_sensitively_and_digests_spell_them_in_lower_case() -> None:
    # Rules match verbs exactly, as Kubernetes does (its verbs are always lower case) ...
    upper = replace_verb(RequestDigest(user="goodu", path="/x"), "GET")
    assert not matches(upper, url_rule(verbs=("get",), urls=("/x",)))
    assert matches(upper, url_rule(verbs=("*",), urls=("/x",)))
    # ... and a digest spells an HTTP method the way the rules do: "GET" used to miss a
    # `verbs: [get]` rule silently and fall to catch-all.
    spelled = RequestDigest(user="goodu", verb="GET", path="/x")
    assert spelled.verb == "get"
    assert matches(spelled, url_rule(verbs=("get",), urls=("/x",)))


def replace_verb(digest: RequestDigest, verb: str) -> RequestDigest:
    """``digest`` with ``verb`` as it is, past the constructor's normalization."""
    from apf_limiter._digest import fill_digest

    fields = [getattr(digest, name) for name in RequestDigest.__slots__]
    fields[RequestDigest.__slots__.index("verb")] = verb
    return fill_digest(RequestDigest, *fields)


def test_schema_matches_if_any_rule_matches_and_empty_rules_match_nothing() -> None:
    assert matches(REQ_N, url_rule(verbs=("badverb",)), url_rule())
    assert not matches(REQ_N)
    # A rule without request rules of the request's kind cannot match it.
    assert not matches(REQ_N, PolicyRulesWithSubjects(subjects=(Subject("Group", "*"),)))
