"""The Classifier: schema order, catch-all fallback, distinguishers and the flow hash."""

from __future__ import annotations

import copy
import gc
import random
import tracemalloc

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from apf_limiter._digest import RequestDigest
from apf_limiter.config import MANDATORY_FLOW_SCHEMAS, MANDATORY_PRIORITY_LEVELS, load_config
from apf_limiter.config._model import (
    FlowDistinguisherMethod,
    FlowSchema,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
)
from apf_limiter.config._serialize import (
    dump_config,
    serialize_flow_schema,
    serialize_priority_level,
)
from apf_limiter.engine import _classifier as classifier_module
from apf_limiter.engine._classifier import Classifier, flow_hash, order_flow_schemas
from apf_limiter.limiter import Limiter
from tests.engine.naive_rules import naive_rule_matches

EVERY_URL = NonResourcePolicyRule(verbs=("*",), non_resource_urls=("*",))
EVERY_RESOURCE = ResourcePolicyRule(
    verbs=("*",), api_groups=("*",), resources=("*",), cluster_scope=True, namespaces=("*",)
)
AUTHENTICATED = Subject("Group", "system:authenticated")
UNAUTHENTICATED = Subject("Group", "system:unauthenticated")


def everything(*subjects: Subject) -> tuple[PolicyRulesWithSubjects, ...]:
    return (PolicyRulesWithSubjects(subjects, (EVERY_RESOURCE,), (EVERY_URL,)),)


def schema(
    name: str,
    precedence: int = 1000,
    *subjects: Subject,
    level: str = "pl",
    method: FlowDistinguisherMethod | None = None,
) -> FlowSchema:
    return FlowSchema(
        name=name,
        priority_level=level,
        matching_precedence=precedence,
        distinguisher_method=method,
        rules=everything(*(subjects or (Subject("Group", "*"),))),
    )


EXEMPT = FlowSchema("exempt", "exempt", 1, None, everything(Subject("Group", "system:masters")))
CATCH_ALL = FlowSchema(
    "catch-all",
    "catch-all",
    10000,
    FlowDistinguisherMethod("ByUser"),
    everything(AUTHENTICATED, UNAUTHENTICATED),
)
PROBES = FlowSchema(
    "probes",
    "exempt",
    2,
    None,
    (
        PolicyRulesWithSubjects(
            (AUTHENTICATED, UNAUTHENTICATED),
            non_resource_rules=(
                NonResourcePolicyRule(("get",), ("/healthz", "/readyz", "/livez")),
            ),
        ),
    ),
)
USERS = FlowSchema(
    "users", "global-default", 9000, FlowDistinguisherMethod("ByUser"), everything(AUTHENTICATED)
)
ANONYMOUS = FlowSchema(
    "anonymous",
    "workload-low",
    9900,
    FlowDistinguisherMethod("ByClientIP"),
    everything(UNAUTHENTICATED),
)
DEFAULT_LIKE = (EXEMPT, PROBES, USERS, ANONYMOUS, CATCH_ALL)

ALICE = RequestDigest(user="alice", groups=("system:authenticated",), verb="get", path="/reports")
ANON = RequestDigest(groups=("system:unauthenticated",), verb="get", path="/x", client="10.0.0.9")


# --- order -------------------------------------------------------------------------------------


def test_order_by_precedence_then_name_supplied_mandatory_schemas_included() -> None:
    schemas = [
        CATCH_ALL,
        schema("b", 500),
        schema("late", 10000),
        schema("a", 500),
        schema("early", 100),
        schema("B", 500),
        EXEMPT,
    ]
    names = [s.name for s in order_flow_schemas(schemas)]
    # "B" < "a" < "b" in code-point order. A catch-all the configuration supplies is sorted
    # like any schema (Kubernetes sorts the API objects it lists): before "late" at 10000.
    assert names == ["exempt", "early", "B", "a", "b", "catch-all", "late"]
    assert [s.name for s in Classifier(schemas, hash_seed=0).flow_schemas] == names


def test_imagined_mandatory_schemas_go_first_and_last() -> None:
    # The loader adds the mandatory schemas a configuration lacks; Kubernetes puts an imagined
    # exempt first and an imagined catch-all last, whatever the others' order.
    before_exempt = schema("a-first", 1)  # precedence 1 and "a-first" < "exempt"
    after_catch_all = schema("late", 10000)  # precedence 10000 and "late" > "catch-all"
    schemas = [CATCH_ALL, after_catch_all, before_exempt, EXEMPT]
    imagined = ("exempt", "catch-all")
    assert [s.name for s in order_flow_schemas(schemas, imagined)] == [
        "exempt",
        "a-first",
        "late",
        "catch-all",
    ]
    classifier = Classifier(schemas, hash_seed=0, imagined=imagined)
    assert [s.name for s in classifier.flow_schemas] == ["exempt", "a-first", "late", "catch-all"]
    # The same schemas given by the configuration: sorted by precedence and name.
    assert [s.name for s in order_flow_schemas(schemas)] == [
        "a-first",
        "exempt",
        "catch-all",
        "late",
    ]


def test_catch_all_given_in_the_configuration_matches_before_a_later_named_schema() -> None:
    # apf_controller.go (digestFlowSchemasLocked): only a missing catch-all is put last.
    late = {
        "name": "zzz",
        "priorityLevelConfiguration": {"name": "global-default"},
        "matchingPrecedence": 10000,
        "rules": [
            {
                "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }
        ],
    }
    level = {
        "name": "global-default",
        "limited": {"nominalConcurrencyShares": 10, "limitResponse": {"type": "Reject"}},
    }
    alice = RequestDigest(user="alice", groups=("system:authenticated",))
    loaded = load_config({"priorityLevels": [level], "flowSchemas": [late]})
    assert loaded.imagined_flow_schemas == ("exempt", "catch-all")
    assert Limiter(loaded, hash_seed=0)._core.controller.classifier.classify(
        alice
    ).flow_schema.name == ("zzz")
    # Equal configurations classify alike: a dump leaves the imagined catch-all out and
    # loading adds it again; a copy keeps the record of what was imagined.
    for again in (load_config(dump_config(loaded)), copy.deepcopy(loaded)):
        assert again == loaded
        classifier = Classifier(
            again.flow_schemas, hash_seed=0, imagined=again.imagined_flow_schemas
        )
        assert classifier.classify(alice).flow_schema.name == "zzz"
    # Both catch-all objects given, as a cluster has them (an FS referring to a mandatory
    # level that is not given would be dangling in Kubernetes).
    given = load_config(
        {
            "priorityLevels": [level, serialize_priority_level(MANDATORY_PRIORITY_LEVELS[1])],
            "flowSchemas": [late, serialize_flow_schema(MANDATORY_FLOW_SCHEMAS[1])],
        }
    )
    assert given.imagined_flow_schemas == ("exempt",)
    classifier = Classifier(given.flow_schemas, hash_seed=0, imagined=given.imagined_flow_schemas)
    assert classifier.classify(alice).flow_schema.name == "catch-all"


def test_first_matching_schema_wins() -> None:
    # Both match everyone; kube-controller-manager < kube-scheduler breaks the tie at 800.
    kcm = schema("kube-controller-manager", 800)
    ks = schema("kube-scheduler", 800)
    early = schema("system-nodes", 500, Subject("Group", "system:nodes"))
    classifier = Classifier([ks, CATCH_ALL, kcm, early], hash_seed=0)
    assert classifier.classify(ALICE).flow_schema is kcm
    node = RequestDigest(user="node1", groups=("system:nodes",), verb="get", path="/")
    assert classifier.classify(node).flow_schema is early


def test_later_schema_matches_when_earlier_candidates_fail() -> None:
    anyone = (Subject("Group", "*"),)
    pods_in_a = FlowSchema(
        "pods-in-a",
        "pl",
        100,
        rules=(
            PolicyRulesWithSubjects(
                anyone,
                (ResourcePolicyRule(("get",), ("",), ("pods",), False, ("a",)),),
                (NonResourcePolicyRule(("get",), ("/a",)),),
            ),
        ),
    )
    pods_anywhere = FlowSchema(
        "pods-anywhere",
        "pl",
        200,
        rules=(
            PolicyRulesWithSubjects(
                anyone,
                (ResourcePolicyRule(("get",), ("",), ("pods",), True, ("*",)),),
                (NonResourcePolicyRule(("get",), ("/",)),),
            ),
        ),
    )
    classifier = Classifier([pods_anywhere, pods_in_a, CATCH_ALL], hash_seed=0)

    def name(digest: RequestDigest) -> str:
        return classifier.classify(digest).flow_schema.name

    assert name(RequestDigest(resource="pods", namespace="a")) == "pods-in-a"
    assert name(RequestDigest(resource="pods", namespace="b")) == "pods-anywhere"
    assert name(RequestDigest(resource="pods")) == "pods-anywhere"
    assert name(RequestDigest(resource="nodes")) == "catch-all"
    assert name(RequestDigest(path="/a/x")) == "pods-in-a"
    assert name(RequestDigest(path="/b")) == "pods-anywhere"


def test_every_listed_verb_matches() -> None:
    reads = FlowSchema(
        "reads",
        "pl",
        100,
        rules=(
            PolicyRulesWithSubjects(
                (Subject("Group", "*"),),
                (ResourcePolicyRule(("get", "list", "watch"), ("*",), ("*",), True, ("*",)),),
                (NonResourcePolicyRule(("get", "head"), ("*",)),),
            ),
        ),
    )
    classifier = Classifier([reads, CATCH_ALL], hash_seed=0)

    def name(verb: str, resource: str = "") -> str:
        digest = RequestDigest(user="u", verb=verb, resource=resource, namespace="ns")
        return classifier.classify(digest).flow_schema.name

    assert [name(v, "pods") for v in ("get", "list", "watch", "delete")] == [
        "reads",
        "reads",
        "reads",
        "catch-all",
    ]
    assert [name(v) for v in ("get", "head", "list", "post")] == [
        "reads",
        "reads",
        "catch-all",
        "catch-all",
    ]


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ValueError, match="'a' is repeated"):
        Classifier([schema("a"), schema("a", 5)], hash_seed=0)


def test_default_like_configuration() -> None:
    classifier = Classifier(list(reversed(DEFAULT_LIKE)), hash_seed=0)

    def name(digest: RequestDigest) -> str:
        return classifier.classify(digest).flow_schema.name

    admin = RequestDigest(user="root", groups=("system:masters", "system:authenticated"))
    assert name(admin) == "exempt"
    assert classifier.classify(admin).priority_level == "exempt"
    assert name(RequestDigest(groups=("system:unauthenticated",), path="/healthz")) == "probes"
    assert name(RequestDigest(groups=("system:authenticated",), path="/livez/ping")) == "probes"
    assert name(RequestDigest(groups=("system:authenticated",), path="/healthzx")) == "users"
    post = RequestDigest(groups=("system:unauthenticated",), verb="post", path="/healthz")
    assert name(post) == "anonymous"
    assert name(ALICE) == "users"
    assert classifier.classify(ALICE).priority_level == "global-default"
    assert name(ANON) == "anonymous"


# --- catch-all fallback --------------------------------------------------------------------------


def test_unmatched_request_falls_back_to_catch_all() -> None:
    classifier = Classifier(DEFAULT_LIKE, hash_seed=0)
    # No group at all: not even catch-all's own rules match, yet catch-all is used.
    stranger = RequestDigest(user="stranger", groups=(), verb="get", path="/x")
    result = classifier.classify(stranger)
    assert result.flow_schema is CATCH_ALL
    assert result.priority_level == "catch-all"
    assert result.distinguisher == "stranger"


def test_unmatched_request_without_catch_all_raises_lookup_error() -> None:
    classifier = Classifier([EXEMPT, USERS], hash_seed=0)
    with pytest.raises(LookupError, match=r"no flow schema matches.*'catch-all'"):
        classifier.classify(RequestDigest(user="stranger"))
    assert classifier.classify(ALICE).flow_schema is USERS


def test_works_without_exempt_and_catch_all() -> None:
    only = schema("only", 500)
    assert Classifier([only], hash_seed=0).classify(ALICE).flow_schema is only


# --- distinguishers ------------------------------------------------------------------------------


def distinguisher(method: FlowDistinguisherMethod | None, digest: RequestDigest) -> str:
    s = schema("s", 500, method=method)
    return Classifier([s], hash_seed=7).classify(digest).distinguisher


def test_distinguisher_by_user() -> None:
    assert distinguisher(FlowDistinguisherMethod("ByUser"), ALICE) == "alice"


def test_distinguisher_by_namespace() -> None:
    by_namespace = FlowDistinguisherMethod("ByNamespace")
    namespaced = RequestDigest(user="u", verb="list", resource="pods", namespace="team-a")
    assert distinguisher(by_namespace, namespaced) == "team-a"
    cluster = RequestDigest(user="u", verb="list", resource="nodes")
    assert distinguisher(by_namespace, cluster) == ""
    # A non-resource request has no namespace, whatever the digest carries.
    odd = RequestDigest(user="u", path="/x", namespace="team-a")
    assert distinguisher(by_namespace, odd) == ""


def test_distinguisher_by_client_ip() -> None:
    assert distinguisher(FlowDistinguisherMethod("ByClientIP"), ANON) == "10.0.0.9"


def test_distinguisher_by_header() -> None:
    by_header = FlowDistinguisherMethod("ByHeader", "x-tenant-id")
    tenant = RequestDigest(headers={"x-tenant-id": "acme", "x-other": "no"})
    assert distinguisher(by_header, tenant) == "acme"
    assert distinguisher(by_header, RequestDigest(headers={"x-other": "no"})) == ""


def test_no_distinguisher_method() -> None:
    assert distinguisher(None, ALICE) == ""
    assert distinguisher(None, ANON) == ""


def test_invalid_distinguisher_methods_rejected() -> None:
    bad = FlowDistinguisherMethod("ByMood")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unsupported distinguisher method type 'ByMood'"):
        Classifier([schema("s", method=bad)], hash_seed=0)
    with pytest.raises(ValueError, match="needs a header name"):
        Classifier([schema("s", method=FlowDistinguisherMethod("ByHeader"))], hash_seed=0)


def test_flows_are_separated_and_stable() -> None:
    classifier = Classifier(DEFAULT_LIKE, hash_seed=99)
    bob = RequestDigest(user="bob", groups=("system:authenticated",), path="/reports")
    first, second, other = (classifier.classify(d) for d in (ALICE, ALICE, bob))
    assert first == second
    assert first.flow_hash == flow_hash("users", "alice", 99)
    assert other.flow_hash == flow_hash("users", "bob", 99)
    assert first.flow_hash != other.flow_hash


def test_cache_limit_keeps_results_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(classifier_module, "_CACHE_LIMIT", 2)
    classifier = Classifier(DEFAULT_LIKE, hash_seed=3)
    for round_ in range(3):
        for i in range(5):
            digest = RequestDigest(user=f"u{i}", groups=("system:authenticated",), path="/")
            result = classifier.classify(digest)
            assert (result.distinguisher, round_) == (f"u{i}", round_)
            assert result.flow_hash == flow_hash("users", f"u{i}", 3)


def test_long_distinguishers_are_hashed_each_time_not_kept() -> None:
    # A client-chosen distinguisher (a header value, up to what the server accepts) must not
    # pin memory after its request: 200 of 16 KB would keep 3.2 MB in the cache.
    classifier = Classifier(DEFAULT_LIKE, hash_seed=3)
    classifier.classify(ALICE)  # warm up
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200):
            user = f"{i:08d}" + "A" * 16_000
            digest = RequestDigest(user=user, groups=("system:authenticated",), path="/")
            result = classifier.classify(digest)
            assert (result.distinguisher, result.flow_hash) == (user, flow_hash("users", user, 3))
            del user, digest, result
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 100_000
    # Short ones are still cached: the same object comes back.
    assert classifier.classify(ALICE) is classifier.classify(ALICE)


# --- flow hash -----------------------------------------------------------------------------------


def test_flow_hash_formula() -> None:
    expected = xxhash.xxh64_intdigest(b"global-default\x00alice", seed=42)
    assert flow_hash("global-default", "alice", 42) == expected
    # Pinned so that a change of formula (or library behaviour) is noticed.
    assert flow_hash("global-default", "alice", 0) == 15216261685884705916
    assert flow_hash("global-default", "alice", 42) == 858628993549404590
    # UTF-8 encoding of non-ASCII distinguishers.
    assert flow_hash("s", "é", 1) == xxhash.xxh64_intdigest("s\0é".encode(), seed=1)


def test_flow_hash_deterministic_and_seeded() -> None:
    assert flow_hash("fs", "alice", 5) == flow_hash("fs", "alice", 5)
    hashes = {flow_hash("fs", "alice", seed) for seed in range(50)}
    assert len(hashes) == 50
    # The separator keeps (schema, distinguisher) pairs apart.
    assert flow_hash("ab", "c", 5) != flow_hash("a", "bc", 5)
    assert 0 <= flow_hash("fs", "alice", 5) < 2**64


def test_flow_hash_seed_reduced_modulo_2_64() -> None:
    assert flow_hash("fs", "d", 2**64 + 5) == flow_hash("fs", "d", 5)
    assert flow_hash("fs", "d", -1) == flow_hash("fs", "d", 2**64 - 1)
    classifier = Classifier(DEFAULT_LIKE, hash_seed=2**64 + 5)
    assert classifier.hash_seed == 5
    assert classifier.classify(ALICE).flow_hash == flow_hash("users", "alice", 5)


def test_schema_without_distinguisher_hashes_empty_distinguisher() -> None:
    result = Classifier(DEFAULT_LIKE, hash_seed=11).classify(
        RequestDigest(groups=("system:masters",))
    )
    assert result.flow_hash == flow_hash("exempt", "", 11)


# --- property: agrees with a naive transcription of the reference --------------------------------


def naive_classify(schemas: list[FlowSchema], d: RequestDigest) -> str:
    # Supplied schemas (none is a built-in mandatory object): precedence, then name.
    ordered = sorted(schemas, key=lambda s: (s.matching_precedence, s.name))
    for s in ordered:
        if any(naive_rule_matches(r, d) for r in s.rules):
            return s.name
    return "catch-all"


# Small alphabets, so that rules and requests often (but not always) meet.
word_lists = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).map(tuple)
subjects = st.one_of(
    st.builds(Subject, kind=st.just("User"), name=st.sampled_from(["a", "b", "*"])),
    st.builds(Subject, kind=st.just("Group"), name=st.sampled_from(["a", "b", "*"])),
    st.builds(
        Subject,
        kind=st.just("ServiceAccount"),
        name=st.sampled_from(["x", "*"]),
        namespace=st.sampled_from(["a", "ab"]),
    ),
)
urls = st.sampled_from(["*", "/", "/a", "/a/", "/a/*", "/a/b", "/ab"])
resource_rules = st.builds(
    ResourcePolicyRule,
    verbs=word_lists,
    api_groups=st.lists(st.sampled_from(["", "a", "*"]), min_size=1, max_size=2).map(tuple),
    resources=st.lists(st.sampled_from(["r", "r/s", "*"]), min_size=1, max_size=2).map(tuple),
    cluster_scope=st.booleans(),
    namespaces=st.lists(st.sampled_from(["a", "b", "*"]), max_size=2).map(tuple),
)
non_resource_rules = st.builds(
    NonResourcePolicyRule,
    verbs=word_lists,
    non_resource_urls=st.lists(urls, min_size=1, max_size=3).map(tuple),
)
rules = st.builds(
    PolicyRulesWithSubjects,
    subjects=st.lists(subjects, min_size=1, max_size=3).map(tuple),
    resource_rules=st.lists(resource_rules, max_size=3).map(tuple),
    non_resource_rules=st.lists(non_resource_rules, max_size=3).map(tuple),
)
schema_names = st.sampled_from(["exempt", "catch-all", "s1", "s2", "s3", "S4", "s5"])


@st.composite
def schema_lists(draw: st.DrawFn) -> list[FlowSchema]:
    names = draw(st.lists(schema_names, min_size=1, max_size=6, unique=True))
    return [
        FlowSchema(
            name=name,
            priority_level=f"pl-{name}",
            matching_precedence=draw(st.sampled_from([1, 500, 1000, 10000])),
            rules=draw(st.lists(rules, min_size=1, max_size=3).map(tuple)),
        )
        for name in names
    ]


digests = st.builds(
    RequestDigest,
    user=st.sampled_from(
        [
            "a",
            "b",
            "system:serviceaccount:a:x",
            "system:serviceaccount:ab:y",
            "system:serviceaccount:a:",
        ]
    ),
    groups=st.lists(st.sampled_from(["a", "b", "c"]), max_size=2).map(tuple),
    verb=st.sampled_from(["a", "b", "a", "b", "c", "*", "b"]),
    path=st.sampled_from(["/", "/a", "/a/", "/a/b", "/ab", "/b"]),
    api_group=st.sampled_from(["", "a", "b"]),
    resource=st.sampled_from(["", "r"]),
    subresource=st.sampled_from(["", "s"]),
    namespace=st.sampled_from(["", "a", "b"]),
)


@settings(max_examples=150, deadline=None)
@given(schemas=schema_lists(), digest=digests, seed=st.integers(0, 2**64 - 1))
def test_classification_matches_reference_and_is_deterministic(
    schemas: list[FlowSchema], digest: RequestDigest, seed: int
) -> None:
    has_catch_all = any(s.name == "catch-all" for s in schemas)
    expected = naive_classify(schemas, digest)
    classifier = Classifier(schemas, hash_seed=seed)
    shuffled = list(schemas)
    random.Random(seed).shuffle(shuffled)
    again = Classifier(shuffled, hash_seed=seed)
    if expected == "catch-all" and not has_catch_all:
        with pytest.raises(LookupError):
            classifier.classify(digest)
        return
    result = classifier.classify(digest)
    assert result.flow_schema in schemas
    assert result.flow_schema.name == expected
    assert result.priority_level == result.flow_schema.priority_level
    assert result.flow_hash == flow_hash(expected, result.distinguisher, seed)
    assert again.classify(digest) == result == classifier.classify(digest)


def test_a_name_with_a_lone_surrogate_gets_a_flow() -> None:
    # An identify hook may hand over any str (json.loads('"\\udcff"') gives a lone surrogate).
    assert flow_hash("users", "bad\udcff", 1) != flow_hash("users", "bad\udcfe", 1)
