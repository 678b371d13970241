"""Loading from every kind of source, and the failures of reading and parsing."""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from apf_limiter._errors import ConfigError
from apf_limiter.config._defaults import MANDATORY_FLOW_SCHEMAS, MANDATORY_PRIORITY_LEVELS
from apf_limiter.config._model import (
    Configuration,
    FlowDistinguisherMethod,
    FlowSchema,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    PriorityLevel,
    QueuingConfiguration,
    Subject,
)
from apf_limiter.config._serialize import serialize_flow_schema
from apf_limiter.config._sources import load_config, load_config_text

EXEMPT_LEVEL, CATCH_ALL_LEVEL = MANDATORY_PRIORITY_LEVELS
EXEMPT_SCHEMA, CATCH_ALL_SCHEMA = MANDATORY_FLOW_SCHEMAS

LEVEL_SPEC: dict[str, object] = {
    "type": "Limited",
    "limited": {
        "nominalConcurrencyShares": 40,
        "lendablePercent": 50,
        "limitResponse": {
            "type": "Queue",
            "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50},
        },
    },
}
SCHEMA_SPEC: dict[str, object] = {
    "priorityLevelConfiguration": {"name": "workload-high"},
    "matchingPrecedence": 500,
    "distinguisherMethod": {"type": "ByUser"},
    "rules": [
        {
            "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["/api/*"]}],
        }
    ],
}
SHORT: dict[str, object] = {
    "serverConcurrencyLimit": 100,
    "requestWaitLimit": 5,
    "borrowingPeriod": 2.5,
    "priorityLevels": [{"name": "workload-high", **LEVEL_SPEC}],
    "flowSchemas": [{"name": "api-users", **SCHEMA_SPEC}],
}

WORKLOAD_HIGH = PriorityLevel(
    name="workload-high",
    type="Limited",
    limited=LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=40,
        lendable_percent=50,
        borrowing_limit_percent=None,
        limit_response=LimitResponse(
            type="Queue",
            queuing=QueuingConfiguration(queues=128, hand_size=6, queue_length_limit=50),
        ),
    ),
)
API_USERS = FlowSchema(
    name="api-users",
    priority_level="workload-high",
    matching_precedence=500,
    distinguisher_method=FlowDistinguisherMethod(type="ByUser"),
    rules=(
        PolicyRulesWithSubjects(
            subjects=(Subject(kind="Group", name="system:authenticated"),),
            non_resource_rules=(
                NonResourcePolicyRule(verbs=("*",), non_resource_urls=("/api/*",)),
            ),
        ),
    ),
)
EXPECTED = Configuration(
    server_concurrency_limit=100,
    request_wait_limit=5.0,
    borrowing_period=2.5,
    priority_levels=(EXEMPT_LEVEL, WORKLOAD_HIGH, CATCH_ALL_LEVEL),
    flow_schemas=(EXEMPT_SCHEMA, API_USERS, CATCH_ALL_SCHEMA),
    imagined_flow_schemas=("exempt", "catch-all"),  # the loader added them
)


def full_object(kind: str, name: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


LEVEL_OBJECT = full_object("PriorityLevelConfiguration", "workload-high", LEVEL_SPEC)
SCHEMA_OBJECT = full_object("FlowSchema", "api-users", SCHEMA_SPEC)


def expected_objects_only() -> Configuration:
    return Configuration(
        priority_levels=EXPECTED.priority_levels,
        flow_schemas=EXPECTED.flow_schemas,
        imagined_flow_schemas=EXPECTED.imagined_flow_schemas,
    )


def test_a_dict_loads() -> None:
    assert load_config(SHORT) == EXPECTED


def test_loading_does_not_touch_the_source() -> None:
    source = copy.deepcopy(SHORT)
    load_config(source)
    assert source == SHORT


def test_a_configuration_is_returned_unchanged() -> None:
    assert load_config(EXPECTED) is EXPECTED


def test_an_empty_dict_gives_the_mandatory_objects_and_default_settings() -> None:
    config = load_config({})
    assert config == Configuration(
        server_concurrency_limit=600,
        request_wait_limit=15.0,
        borrowing_period=10.0,
        priority_levels=MANDATORY_PRIORITY_LEVELS,
        flow_schemas=MANDATORY_FLOW_SCHEMAS,
        imagined_flow_schemas=("exempt", "catch-all"),
    )


def test_a_json_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    path.write_text(json.dumps(SHORT), encoding="utf-8")
    assert load_config(path) == EXPECTED
    assert load_config(str(path)) == EXPECTED


def test_a_yaml_file_loads(tmp_path: Path) -> None:
    import yaml

    for suffix in (".yaml", ".yml"):
        path = tmp_path / f"apf{suffix}"
        path.write_text(yaml.safe_dump(SHORT), encoding="utf-8")
        assert load_config(path) == EXPECTED


def test_multi_document_yaml_mixes_our_shape_objects_and_lists(tmp_path: Path) -> None:
    import yaml

    settings = {"serverConcurrencyLimit": 100, "requestWaitLimit": 5, "borrowingPeriod": 2.5}
    listed = {"apiVersion": "v1", "kind": "List", "items": [SCHEMA_OBJECT]}
    path = tmp_path / "apf.yaml"
    path.write_text(yaml.safe_dump_all([settings, LEVEL_OBJECT, listed]), encoding="utf-8")
    assert load_config(path) == EXPECTED


def test_a_kind_list_loads() -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": [LEVEL_OBJECT, SCHEMA_OBJECT]}
    assert load_config(listed) == expected_objects_only()


def test_a_single_object_loads() -> None:
    config = load_config(LEVEL_OBJECT)
    assert config.priority_levels == (EXEMPT_LEVEL, WORKLOAD_HIGH, CATCH_ALL_LEVEL)
    assert config.flow_schemas == MANDATORY_FLOW_SCHEMAS


def test_a_list_of_objects_loads() -> None:
    assert load_config([LEVEL_OBJECT, SCHEMA_OBJECT]) == expected_objects_only()


def test_full_objects_inside_our_shape_load() -> None:
    mixed = SHORT | {"priorityLevels": [LEVEL_OBJECT], "flowSchemas": [SCHEMA_OBJECT]}
    assert load_config(mixed) == EXPECTED


def test_text_loads_as_yaml_or_json() -> None:
    assert load_config_text(json.dumps(SHORT), format="json") == EXPECTED
    assert load_config_text(json.dumps(SHORT)) == EXPECTED  # JSON is YAML too
    with pytest.raises(ValueError, match="format"):
        load_config_text("{}", format="toml")


def test_typed_api_lists_give_their_items_kind_and_version() -> None:
    items = [{"metadata": {"name": "workload-high"}, "spec": LEVEL_SPEC}]
    typed = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfigurationList",
        "items": items,
    }
    assert load_config(typed).priority_level("workload-high") == WORKLOAD_HIGH


def test_bad_yaml_syntax_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("priorityLevels:\n  - name: web\n    limited: {a: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (problem,) = caught.value.problems
    assert problem.path == str(path)
    assert problem.message.startswith("invalid YAML at line 4, column 1: ")


def test_bad_json_syntax_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"priorityLevels": [\n  {"name": "web",}\n]}', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: invalid JSON at line 2, column 18: Expecting property name enclosed in "
        "double quotes"
    ]


@pytest.mark.parametrize("text_format", ["json", "yaml"])
def test_what_the_parsers_raise_beyond_syntax_errors_is_a_config_error(text_format: str) -> None:
    # Python refuses integers of more than 4,300 digits, and nesting beyond the recursion
    # limit: a configuration file must never raise anything but ConfigError.
    too_long = '{"serverConcurrencyLimit": ' + "9" * 5000 + "}"
    with pytest.raises(ConfigError, match="4300 digits"):
        load_config_text(too_long, format=text_format)
    too_deep = "[" * 5000 + "]" * 5000
    with pytest.raises(ConfigError, match="nest"):  # PyYAML has its own limit
        load_config_text(too_deep, format=text_format)


def test_keys_given_twice_are_problems() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("serverConcurrencyLimit: 1\nserverConcurrencyLimit: 2\n")
    assert [str(p) for p in caught.value.problems] == [
        'invalid YAML at line 2, column 1: duplicate key "serverConcurrencyLimit"'
    ]
    with pytest.raises(ConfigError) as caught:
        load_config_text('{"a": {"b": 1, "b": 2}}', format="json")
    assert [str(p) for p in caught.value.problems] == ['invalid JSON: duplicate key "b"']


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: cannot read the file: No such file or directory (looked for {path}; the "
        f"working directory is {os.getcwd()})"
    ]


def test_a_missing_relative_path_names_the_absolute_path_and_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A relative path resolves against the working directory, which a service manager or a
    # container often sets elsewhere than the user thinks.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config("conf/apf.yaml")
    message = str(caught.value.problems[0])
    assert f"looked for {tmp_path / 'conf' / 'apf.yaml'}" in message
    assert f"the working directory is {tmp_path}" in message


def test_an_unknown_suffix_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "apf.toml"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.problems[0].message == (
        "unsupported file type: the name must end in .yaml, .yml or .json "
        "(for YAML or JSON text, use load_config_text())"
    )


def test_missing_pyyaml_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "apf.yaml"
    path.write_text("serverConcurrencyLimit: 10\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "yaml", None)  # makes `import yaml` fail
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: reading YAML needs PyYAML: pip install 'apf_limiter[yaml]'"
    ]
    json_path = tmp_path / "apf.json"
    json_path.write_text('{"serverConcurrencyLimit": 10}', encoding="utf-8")
    assert load_config(json_path).server_concurrency_limit == 10  # JSON needs no PyYAML


def test_an_unsupported_source_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not int"):
        load_config(42)  # type: ignore[arg-type]


def test_a_bad_configuration_never_half_applies() -> None:
    good = load_config(SHORT)
    bad = copy.deepcopy(SHORT)
    bad["serverConcurrencyLimit"] = 0
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert len(caught.value.problems) == 1
    # The earlier result is a separate, frozen object that the failed load did not change.
    assert good == EXPECTED
    with pytest.raises(AttributeError):
        good.server_concurrency_limit = 0  # type: ignore[misc]


def test_each_load_returns_a_new_configuration() -> None:
    first, second = load_config(SHORT), load_config(SHORT)
    assert first == second
    assert first is not second


def test_config_error_message_lists_every_problem() -> None:
    bad = {"serverConcurrencyLimit": -1, "requestWaitLimit": 0, "borrowingPeriod": 0}
    with pytest.raises(ConfigError) as caught:
        load_config(bad)
    assert str(caught.value) == (
        "invalid configuration (3 problems):\n"
        "  serverConcurrencyLimit: Invalid value: -1: must be positive\n"
        "  requestWaitLimit: Invalid value: 0: must be positive\n"
        "  borrowingPeriod: Invalid value: 0: must be positive"
    )


def test_a_settings_list_of_the_wrong_type_hides_no_other_document_s_problems() -> None:
    level = full_object("PriorityLevelConfiguration", "x", {"type": "Bogus"})
    schema = full_object(
        "FlowSchema", "y", {"priorityLevelConfiguration": {"name": "x"}, "matchingPrecedence": -1}
    )
    with pytest.raises(ConfigError) as caught:
        load_config([{"priorityLevels": "oops", "flowSchemas": 5}, level, schema])
    problems = [(p.path, p.message) for p in caught.value.problems]
    assert ("priorityLevels", 'Invalid value: "oops": must be a list') in problems
    assert ("flowSchemas", "Invalid value: 5: must be a list") in problems
    assert (
        "priorityLevels[x].spec.type",
        'Unsupported value: "Bogus": supported values: "Exempt", "Limited"',
    ) in problems
    assert any(path == "flowSchemas[y].spec.matchingPrecedence" for path, _ in problems)


def test_an_empty_distinguisher_header_is_no_header_even_for_the_mandatory_catch_all() -> None:
    catch_all = serialize_flow_schema(MANDATORY_FLOW_SCHEMAS[1])
    spec: dict[str, Any] = {key: value for key, value in catch_all.items() if key != "name"}
    spec["distinguisherMethod"] = {"type": "ByUser", "header": ""}
    config = load_config({"flowSchemas": [{"name": "catch-all", **spec}]})
    assert config.flow_schemas[-1] == MANDATORY_FLOW_SCHEMAS[1]
    assert config.imagined_flow_schemas == ("exempt",)


def test_settings_accept_integers_and_floats() -> None:
    config = load_config({"requestWaitLimit": 60, "borrowingPeriod": 0.5})
    assert (config.request_wait_limit, config.borrowing_period) == (60.0, 0.5)
    assert isinstance(config.request_wait_limit, float)


def test_an_object_document_without_kind_asks_for_the_kind() -> None:
    document = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "metadata": {"name": "x"}}
    with pytest.raises(ConfigError) as caught:
        load_config(document)
    assert [str(p) for p in caught.value.problems] == [
        'kind: Required value: must be one of "FlowSchema", "PriorityLevelConfiguration"'
    ]


def test_entries_sharing_a_name_each_report_their_problems() -> None:
    level = {"name": "a", "type": "Limited", "limited": {"nominalConcurrencyShares": "x"}}
    again = {"name": "a", "type": "Limited", "limited": {"nominalConcurrencyShares": "y"}}
    with pytest.raises(ConfigError) as caught:
        load_config({"priorityLevels": [level, again]})
    shares = 'limited.nominalConcurrencyShares: Invalid value: "{}": must be an integer'
    assert [str(p) for p in caught.value.problems] == [
        "priorityLevels[a]." + shares.format("x"),
        "priorityLevels[1]." + shares.format("y"),
        'priorityLevels[1]: Duplicate value: "a"',
    ]
