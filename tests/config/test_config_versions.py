"""API versions (v1, v1beta3, v1beta2, v1beta1), their defaulting, and dump/load round trips."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from apf_limiter._errors import ConfigError
from apf_limiter.config._defaults import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    default_configuration,
    kubernetes_bootstrap_configuration,
)
from apf_limiter.config._model import (
    Configuration,
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
from apf_limiter.config._serialize import (
    dump_config,
    serialize_flow_schema,
    serialize_priority_level,
)
from apf_limiter.config._sources import load_config

CATCH_ALL_LEVEL = MANDATORY_PRIORITY_LEVELS[1]
EXEMPT_SCHEMA, CATCH_ALL_SCHEMA = MANDATORY_FLOW_SCHEMAS
GROUP = "flowcontrol.apiserver.k8s.io"
PRESERVE = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"


def level_object(
    version: str, limited: Mapping[str, object], annotations: dict[str, str] | None = None
) -> dict[str, object]:
    metadata: dict[str, object] = {"name": "web"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "PriorityLevelConfiguration",
        "metadata": metadata,
        "spec": {"type": "Limited", "limited": limited},
    }


def shares_of(source: dict[str, object]) -> int:
    return load_config(source).priority_level("web").nominal_concurrency_shares


REJECT = {"type": "Reject"}


def test_v1_keeps_an_explicit_zero_and_defaults_a_missing_value() -> None:
    zero = {"nominalConcurrencyShares": 0, "limitResponse": REJECT}
    assert shares_of(level_object("v1", zero)) == 0
    assert shares_of(level_object("v1", {"limitResponse": REJECT})) == 30


def test_v1beta3_defaults_zero_shares_unless_the_annotation_preserves_them() -> None:
    zero = {"nominalConcurrencyShares": 0, "limitResponse": REJECT}
    assert shares_of(level_object("v1beta3", zero)) == 30
    assert shares_of(level_object("v1beta3", {"limitResponse": REJECT})) == 30
    assert shares_of(level_object("v1beta3", zero, {PRESERVE: ""})) == 0
    assert shares_of(level_object("v1beta3", {"limitResponse": REJECT}, {PRESERVE: "true"})) == 0
    seven = {"nominalConcurrencyShares": 7, "limitResponse": REJECT}
    assert shares_of(level_object("v1beta3", seven, {PRESERVE: ""})) == 7
    assert shares_of(level_object("v1beta3", seven)) == 7


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_old_betas_use_assured_concurrency_shares(version: str) -> None:
    assert (
        shares_of(level_object(version, {"assuredConcurrencyShares": 25, "limitResponse": REJECT}))
        == 25
    )
    assert (
        shares_of(level_object(version, {"assuredConcurrencyShares": 0, "limitResponse": REJECT}))
        == 30
    )
    with pytest.raises(ConfigError) as caught:
        load_config(
            level_object(version, {"nominalConcurrencyShares": 25, "limitResponse": REJECT})
        )
    assert [str(p) for p in caught.value.problems] == [
        "priorityLevels[web].spec.limited.nominalConcurrencyShares: "
        'Unknown field: did you mean "assuredConcurrencyShares"?'
    ]


def test_the_preserve_annotation_is_forbidden_outside_v1beta3() -> None:
    zero = {"nominalConcurrencyShares": 0, "limitResponse": REJECT}
    for version in ("v1", "v1beta2"):
        shares = "assuredConcurrencyShares" if version == "v1beta2" else "nominalConcurrencyShares"
        limited = {shares: 3, "limitResponse": REJECT}
        with pytest.raises(ConfigError) as caught:
            load_config(level_object(version, limited, {PRESERVE: ""}))
        assert [str(p) for p in caught.value.problems] == [
            "priorityLevels[web].metadata.annotations: Forbidden: "
            f"annotation '{PRESERVE}' is forbidden"
        ]
    assert shares_of(level_object("v1beta3", zero, {PRESERVE: "", "other": "x"})) == 0


def test_v1_defaults_for_queuing_lendable_and_precedence() -> None:
    limited = {"limitResponse": {"type": "Queue", "queuing": {"queues": 0, "handSize": 0}}}
    schema = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "web"},
        "spec": {"priorityLevelConfiguration": {"name": "web"}, "matchingPrecedence": 0},
    }
    config = load_config([level_object("v1", limited), schema])
    assert config.priority_level("web").limited == LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=30,
        lendable_percent=0,
        borrowing_limit_percent=None,
        limit_response=LimitResponse(
            type="Queue",
            queuing=QueuingConfiguration(queues=64, hand_size=8, queue_length_limit=50),
        ),
    )
    assert config.flow_schema("web").matching_precedence == 1000


LIMITED_FIELDS: dict[str, object] = {
    "lendablePercent": 25,
    "borrowingLimitPercent": 300,
    "limitResponse": {
        "type": "Queue",
        "queuing": {"queues": 32, "handSize": 4, "queueLengthLimit": 10},
    },
}
EXPECTED_WEB = PriorityLevel(
    name="web",
    type="Limited",
    limited=LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=12,
        lendable_percent=25,
        borrowing_limit_percent=300,
        limit_response=LimitResponse(
            type="Queue",
            queuing=QueuingConfiguration(queues=32, hand_size=4, queue_length_limit=10),
        ),
    ),
)


@pytest.mark.parametrize(
    ("version", "shares_field"),
    [
        ("v1", "nominalConcurrencyShares"),
        ("v1beta3", "nominalConcurrencyShares"),
        ("v1beta2", "assuredConcurrencyShares"),
        ("v1beta1", "assuredConcurrencyShares"),
    ],
)
def test_every_version_round_trips_through_v1(version: str, shares_field: str) -> None:
    loaded = load_config(level_object(version, {shares_field: 12, **LIMITED_FIELDS}))
    assert loaded.priority_level("web") == EXPECTED_WEB
    dumped = dump_config(loaded, form="kubernetes")
    assert load_config(dumped) == loaded
    web = serialize_priority_level(loaded.priority_level("web"), form="kubernetes")
    assert web["apiVersion"] == f"{GROUP}/v1"
    assert web in dumped["priorityLevels"]  # type: ignore[operator]


def test_v1beta3_zero_shares_round_trip_through_v1() -> None:
    loaded = load_config(
        level_object(
            "v1beta3", {"nominalConcurrencyShares": 0, "limitResponse": REJECT}, {PRESERVE: ""}
        )
    )
    dumped = serialize_priority_level(loaded.priority_level("web"), form="kubernetes")
    assert dumped["spec"] == {
        "type": "Limited",
        "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0, "limitResponse": REJECT},
    }
    assert load_config(dumped).priority_level("web") == loaded.priority_level("web")


RICH = Configuration(
    server_concurrency_limit=50,
    request_wait_limit=2.5,
    borrowing_period=1.0,
    priority_levels=(
        PriorityLevel(
            name="exempt",
            type="Exempt",
            exempt=ExemptPriorityLevelConfiguration(
                nominal_concurrency_shares=7, lendable_percent=20
            ),
        ),
        EXPECTED_WEB,
        PriorityLevel(
            name="jail",
            type="Limited",
            limited=LimitedPriorityLevelConfiguration(
                nominal_concurrency_shares=0,
                lendable_percent=0,
                borrowing_limit_percent=0,
                limit_response=LimitResponse(type="Reject", queuing=None),
            ),
        ),
    ),
    flow_schemas=(
        FlowSchema(
            name="tenants",
            priority_level="web",
            matching_precedence=300,
            distinguisher_method=FlowDistinguisherMethod(type="ByHeader", header="x-tenant-id"),
            rules=(
                PolicyRulesWithSubjects(
                    subjects=(
                        Subject(kind="ServiceAccount", name="*", namespace="tenants"),
                        Subject(kind="User", name="alice"),
                    ),
                    resource_rules=(
                        ResourcePolicyRule(
                            verbs=("get", "list"),
                            api_groups=("", "apps"),
                            resources=("pods", "deployments/scale"),
                            cluster_scope=False,
                            namespaces=("tenant-a",),
                        ),
                    ),
                    non_resource_rules=(
                        NonResourcePolicyRule(verbs=("post",), non_resource_urls=("/api/*", "/")),
                    ),
                ),
            ),
        ),
        FlowSchema(
            name="anonymous",
            priority_level="jail",
            matching_precedence=9000,
            distinguisher_method=FlowDistinguisherMethod(type="ByClientIP"),
            rules=(
                PolicyRulesWithSubjects(
                    subjects=(Subject(kind="Group", name="system:unauthenticated"),),
                    non_resource_rules=(
                        NonResourcePolicyRule(verbs=("*",), non_resource_urls=("*",)),
                    ),
                ),
            ),
        ),
    ),
)


@pytest.mark.parametrize("form", ["short", "kubernetes"])
@pytest.mark.parametrize(
    "config",
    [default_configuration(), kubernetes_bootstrap_configuration(), load_config({})],
    ids=["web-default", "kubernetes-bootstrap", "empty"],
)
def test_dump_then_load_gives_the_same_configuration(config: Configuration, form: str) -> None:
    assert load_config(dump_config(config, form=form)) == config


@pytest.mark.parametrize("form", ["short", "kubernetes"])
def test_a_rich_configuration_round_trips(form: str) -> None:
    loaded = load_config(dump_config(RICH, form=form))
    # The given exempt level is kept; the missing mandatory objects are added around the rest.
    assert loaded.priority_levels == (*RICH.priority_levels, CATCH_ALL_LEVEL)
    assert loaded.flow_schemas == (EXEMPT_SCHEMA, *RICH.flow_schemas, CATCH_ALL_SCHEMA)
    assert load_config(dump_config(loaded, form=form)) == loaded


def test_by_header_names_are_stored_lower_case() -> None:
    schema = serialize_flow_schema(RICH.flow_schemas[0])
    schema["distinguisherMethod"] = {"type": "ByHeader", "header": "X-Tenant-ID"}
    loaded = load_config(
        {"priorityLevels": [serialize_priority_level(EXPECTED_WEB)], "flowSchemas": [schema]}
    )
    assert loaded.flow_schema("tenants").distinguisher_method == FlowDistinguisherMethod(
        type="ByHeader", header="x-tenant-id"
    )


def test_dump_short_form_is_the_documented_shape() -> None:
    assert serialize_priority_level(EXPECTED_WEB) == {
        "name": "web",
        "type": "Limited",
        "limited": {
            "nominalConcurrencyShares": 12,
            "lendablePercent": 25,
            "borrowingLimitPercent": 300,
            "limitResponse": {
                "type": "Queue",
                "queuing": {"queues": 32, "handSize": 4, "queueLengthLimit": 10},
            },
        },
    }
    assert serialize_flow_schema(RICH.flow_schemas[1], form="kubernetes") == {
        "apiVersion": f"{GROUP}/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "anonymous"},
        "spec": {
            "matchingPrecedence": 9000,
            "priorityLevelConfiguration": {"name": "jail"},
            "distinguisherMethod": {"type": "ByClientIP"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "system:unauthenticated"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def test_dump_rejects_an_unknown_form() -> None:
    with pytest.raises(ValueError, match="form must be one of"):
        dump_config(RICH, form="yaml")
