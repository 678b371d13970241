"""Mandatory objects, short-form conveniences, the web-app default and Kubernetes' bootstrap set."""

from __future__ import annotations

import math
from pathlib import Path

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
    FlowSchema,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    PriorityLevel,
    QueuingConfiguration,
)
from apf_limiter.config._serialize import serialize_flow_schema, serialize_priority_level
from apf_limiter.config._sources import load_config, load_config_text

BOOTSTRAP_YAML = Path(__file__).parent.parent / "data" / "kubernetes-bootstrap.yaml"
EXEMPT_LEVEL, CATCH_ALL_LEVEL = MANDATORY_PRIORITY_LEVELS
EXEMPT_SCHEMA, CATCH_ALL_SCHEMA = MANDATORY_FLOW_SCHEMAS
REJECT_ONLY = {"limited": {"limitResponse": {"type": "Reject"}}}


def names(items: tuple[PriorityLevel, ...] | tuple[FlowSchema, ...]) -> list[str]:
    return [item.name for item in items]


def test_missing_mandatory_objects_are_added_first_and_last() -> None:
    config = load_config(
        {
            "priorityLevels": [{"name": "web", **REJECT_ONLY}],
            "flowSchemas": [{"name": "web", "priorityLevelConfiguration": {"name": "web"}}],
        }
    )
    assert names(config.priority_levels) == ["exempt", "web", "catch-all"]
    assert names(config.flow_schemas) == ["exempt", "web", "catch-all"]
    assert config.priority_levels[0] == EXEMPT_LEVEL
    assert config.flow_schemas[-1] == CATCH_ALL_SCHEMA


def test_given_mandatory_objects_keep_their_place() -> None:
    config = load_config(
        {
            "priorityLevels": [
                serialize_priority_level(CATCH_ALL_LEVEL),
                {"name": "web", **REJECT_ONLY},
            ],
            "flowSchemas": [serialize_flow_schema(CATCH_ALL_SCHEMA, form="kubernetes")],
        }
    )
    assert names(config.priority_levels) == ["exempt", "catch-all", "web"]
    assert names(config.flow_schemas) == ["exempt", "catch-all"]


def test_schemas_may_reference_mandatory_levels_that_are_not_given() -> None:
    config = load_config(
        {"flowSchemas": [{"name": "ops", "priorityLevelConfiguration": {"name": "exempt"}}]}
    )
    assert config.flow_schema("ops").priority_level == "exempt"


@pytest.mark.parametrize("full", [False, True])
def test_the_exempt_level_may_change_only_its_exempt_part(full: bool) -> None:
    changed = PriorityLevel(
        name="exempt",
        type="Exempt",
        exempt=ExemptPriorityLevelConfiguration(nominal_concurrency_shares=10, lendable_percent=50),
    )
    form = "kubernetes" if full else "short"
    config = load_config({"priorityLevels": [serialize_priority_level(changed, form=form)]})
    assert config.priority_level("exempt") == changed


def test_the_exempt_level_in_short_form_needs_no_type() -> None:
    config = load_config({"priorityLevels": [{"name": "exempt", "exempt": {"lendablePercent": 5}}]})
    assert config.priority_level("exempt").exempt == ExemptPriorityLevelConfiguration(0, 5)
    assert load_config({"priorityLevels": [{"name": "exempt"}]}).priority_levels[0] == EXEMPT_LEVEL


def test_a_changed_catch_all_level_is_rejected() -> None:
    changed = serialize_priority_level(CATCH_ALL_LEVEL, form="kubernetes")
    changed["spec"]["limited"]["lendablePercent"] = 10  # type: ignore[index]
    with pytest.raises(ConfigError) as caught:
        load_config({"priorityLevels": [changed]})
    assert [str(p) for p in caught.value.problems] == [
        "priorityLevels[catch-all].spec: Invalid value: "
        "spec of 'catch-all' must equal the fixed value"
    ]


def test_a_changed_exempt_schema_is_rejected() -> None:
    changed = serialize_flow_schema(EXEMPT_SCHEMA)
    changed["distinguisherMethod"] = {"type": "ByUser"}
    with pytest.raises(ConfigError) as caught:
        load_config({"flowSchemas": [changed]})
    assert [str(p) for p in caught.value.problems] == [
        "flowSchemas[exempt]: Invalid value: spec of 'exempt' must equal the fixed value"
    ]


def limited_of(source: dict[str, object]) -> LimitedPriorityLevelConfiguration | None:
    return load_config({"priorityLevels": [source]}).priority_level("web").limited


DEFAULT_QUEUE = LimitResponse(
    type="Queue", queuing=QueuingConfiguration(queues=64, hand_size=8, queue_length_limit=50)
)


def test_short_form_defaults_to_a_queuing_limited_level() -> None:
    assert limited_of({"name": "web", "limited": {}}) == LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=30,
        lendable_percent=0,
        borrowing_limit_percent=None,
        limit_response=DEFAULT_QUEUE,
    )
    with_queue = limited_of({"name": "web", "limited": {"limitResponse": {"type": "Queue"}}})
    assert with_queue is not None
    assert with_queue.limit_response == DEFAULT_QUEUE
    partial = limited_of(
        {"name": "web", "limited": {"limitResponse": {"type": "Queue", "queuing": {"queues": 16}}}}
    )
    assert partial is not None
    assert partial.limit_response.queuing == QueuingConfiguration(16, 8, 50)


def test_short_form_may_leave_out_the_limited_part() -> None:
    level = load_config({"priorityLevels": [{"name": "web"}]}).priority_level("web")
    assert level.limited == LimitedPriorityLevelConfiguration()
    assert level.queuing == QueuingConfiguration(queues=64, hand_size=8, queue_length_limit=50)
    # A short-form level given as exempt still may not carry a `limited` part.
    with pytest.raises(ConfigError) as caught:
        load_config({"priorityLevels": [{"name": "web", "type": "Exempt"}]})
    assert "type must be 'Exempt' if and only if name is 'exempt'" in str(caught.value)


def test_short_form_schema_defaults() -> None:
    schema = load_config(
        {"flowSchemas": [{"name": "web", "priorityLevelConfiguration": {"name": "catch-all"}}]}
    ).flow_schema("web")
    assert schema == FlowSchema(name="web", priority_level="catch-all", matching_precedence=1000)


def go_round(value: float) -> int:
    return math.floor(value + 0.5)  # Go's math.Round for the non-negative values here


def nominal_and_lendable(config: Configuration) -> dict[str, tuple[int, int]]:
    total = sum(level.nominal_concurrency_shares for level in config.priority_levels)
    result: dict[str, tuple[int, int]] = {}
    for level in config.priority_levels:
        nominal = math.ceil(
            config.server_concurrency_limit * level.nominal_concurrency_shares / total
        )
        result[level.name] = (nominal, go_round(nominal * level.lendable_percent / 100))
    return result


def test_the_web_default_numbers_are_the_documented_ones() -> None:
    config = default_configuration()
    assert load_config(config) is config
    assert (config.server_concurrency_limit, config.request_wait_limit) == (600, 15.0)
    assert config.borrowing_period == 10.0
    assert sum(level.nominal_concurrency_shares for level in config.priority_levels) == 245
    # docs/defaults.md: nominal and lendable seats at ServerCL 600.
    assert nominal_and_lendable(config) == {
        "exempt": (0, 0),
        "catch-all": (13, 0),
        "global-default": (368, 184),
        "workload-low": (221, 199),
    }
    assert [(s.name, s.matching_precedence, s.priority_level) for s in config.flow_schemas] == [
        ("exempt", 1, "exempt"),
        ("probes", 2, "exempt"),
        ("anonymous", 9000, "workload-low"),
        ("global-default", 9900, "global-default"),
        ("catch-all", 10000, "catch-all"),
    ]
    probes = config.flow_schema("probes").rules[0].non_resource_rules[0]
    assert probes.verbs == ("get", "head")
    assert probes.non_resource_urls == ("/healthz", "/readyz", "/livez", "/health", "/metrics")
    anonymous = config.flow_schema("anonymous")
    assert anonymous.distinguisher_method is not None
    assert anonymous.distinguisher_method.type == "ByClientIP"


def test_the_bootstrap_set_has_kubernetes_worked_numbers() -> None:
    # Upstream's bootstrap objects at ServerCL 600 (nominalCLSum 602; apf_controller.go).
    numbers = nominal_and_lendable(kubernetes_bootstrap_configuration())
    assert numbers == {
        "exempt": (0, 0),
        "catch-all": (13, 0),
        "system": (74, 24),
        "node-high": (98, 25),
        "leader-election": (25, 0),
        "workload-high": (98, 49),
        "workload-low": (245, 221),
        "global-default": (49, 25),
    }
    assert sum(nominal for nominal, _ in numbers.values()) == 602


def test_the_kubectl_bootstrap_file_loads_as_the_bootstrap_set() -> None:
    loaded = load_config(BOOTSTRAP_YAML)
    expected = kubernetes_bootstrap_configuration()
    # kubectl prints flow schemas, then levels, each sorted by name.
    assert names(loaded.flow_schemas) == sorted(names(expected.flow_schemas))
    assert names(loaded.priority_levels) == sorted(names(expected.priority_levels))
    assert sorted(loaded.flow_schemas, key=lambda s: s.name) == sorted(
        expected.flow_schemas, key=lambda s: s.name
    )
    assert sorted(loaded.priority_levels, key=lambda s: s.name) == sorted(
        expected.priority_levels, key=lambda s: s.name
    )
    assert loaded.server_concurrency_limit == expected.server_concurrency_limit


def test_the_kubectl_bootstrap_file_carries_what_kubectl_prints() -> None:
    import yaml

    document = yaml.safe_load(BOOTSTRAP_YAML.read_text(encoding="utf-8"))
    assert document["kind"] == "List"
    for item in document["items"]:
        assert item["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"
        assert item["metadata"]["annotations"] == {"apf.kubernetes.io/autoupdate-spec": "true"}
        assert {
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        } <= set(item["metadata"])
        if item["kind"] == "FlowSchema":
            assert item["status"]["conditions"][0]["type"] == "Dangling"


DOCS = Path(__file__).parent.parent.parent / "docs"


def first_yaml_block(path: Path, after: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index("```yaml\n", text.index(after)) + len("```yaml\n")
    return text[start : text.index("```", start)]


def test_the_documented_web_default_is_the_default() -> None:
    block = first_yaml_block(DOCS / "defaults.md", "## The web-app default at a glance")
    assert load_config_text(block) == default_configuration()


def test_the_documented_shape_example_loads() -> None:
    block = first_yaml_block(DOCS / "configuration.md", "## The shape of a configuration")
    config = load_config_text(block)
    assert [level.name for level in config.priority_levels] == [
        "exempt",
        "workload-high",
        "catch-all",
    ]
    assert config.flow_schema("api-users").priority_level == "workload-high"
