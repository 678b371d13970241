"""Unknown and misspelled keys, value formatting, names and the entropy rule."""

from __future__ import annotations

import pytest

from apf_limiter._errors import ConfigError
from apf_limiter.config._names import dns1123_label_errors, dns1123_subdomain_errors
from apf_limiter.config._problems import Problems, go_value
from apf_limiter.config._rules import non_resource_url_error
from apf_limiter.config._sources import load_config
from apf_limiter.engine._shuffle_sharding import required_entropy_bits


def problems_of(source: object) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(source)  # type: ignore[arg-type]
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"flowschemas": []}, 'flowschemas: Unknown field: did you mean "flowSchemas"?'),
        ({"colour": "blue"}, "colour: Unknown field"),
        (
            {"priorityLevels": [{"name": "web", "limited": {}, "typ": "Limited"}]},
            'priorityLevels[web].typ: Unknown field: did you mean "type"?',
        ),
        (
            {"priorityLevels": [{"name": "web", "limited": {"lendable": 5}}]},
            'priorityLevels[web].limited.lendable: Unknown field: did you mean "lendablePercent"?',
        ),
        (
            {
                "priorityLevels": [
                    {
                        "name": "web",
                        "limited": {"limitResponse": {"type": "Queue", "queuing": {"QUEUES": 5}}},
                    }
                ]
            },
            "priorityLevels[web].limited.limitResponse.queuing.QUEUES: "
            'Unknown field: did you mean "queues"?',
        ),
        (
            {
                "flowSchemas": [
                    {
                        "name": "web",
                        "priorityLevelConfiguration": {"name": "catch-all"},
                        "rules": [
                            {
                                "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                                "resourceRules": [
                                    {
                                        "verbs": ["*"],
                                        "apiGroups": ["*"],
                                        "resources": ["*"],
                                        "clusterScope": True,
                                        "namespace": ["a"],
                                    }
                                ],
                            }
                        ],
                    }
                ]
            },
            "flowSchemas[web].rules[0].resourceRules[0].namespace: "
            'Unknown field: did you mean "namespaces"?',
        ),
    ],
)
def test_unknown_keys_are_reported_at_every_depth(source: object, expected: str) -> None:
    assert problems_of(source) == [expected]


def test_a_misspelled_required_key_is_reported_once() -> None:
    source = {"priorityLevels": [{"name": "web", "limted": {"nominalConcurrencyShares": 5}}]}
    assert problems_of(source) == [
        'priorityLevels[web].limted: Unknown field: did you mean "limited"?'
    ]


def test_a_misspelling_beside_the_real_key_does_not_hide_its_problems() -> None:
    source = {
        "priorityLevels": [
            {"name": "web", "limited": {"lendablePercent": 101, "lendablePercnt": 1}}
        ]
    }
    assert problems_of(source) == [
        "priorityLevels[web].limited.lendablePercnt: "
        'Unknown field: did you mean "lendablePercent"?',
        "priorityLevels[web].limited.lendablePercent: Invalid value: 101: "
        "must be between 0 and 100, inclusive",
    ]


def test_metadata_and_status_extras_are_ignored() -> None:
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {
            "name": "web",
            "uid": "0d5b1b43",
            "labels": {"team": "a"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "finalizers": ["x"],
        },
        "spec": {"type": "Limited", "limited": {"limitResponse": {"type": "Reject"}}},
        "status": {"conditions": [{"type": "ConcurrencyShared", "extra": 1}], "observed": 3},
    }
    assert load_config(level).priority_level("web").type == "Limited"


def test_short_form_entries_reject_object_keys_they_do_not_have() -> None:
    source = {"priorityLevels": [{"name": "web", "limited": {}, "spec": {}}]}
    # `spec` makes it a full object, which then lacks apiVersion, kind and metadata.name.
    assert problems_of(source) == [
        "priorityLevels[0].name: Unknown field",
        "priorityLevels[0].limited: Unknown field",
        "priorityLevels[0].apiVersion: Required value",
        "priorityLevels[0].kind: Required value",
        "priorityLevels[0].metadata.name: Required value: name or generateName is required",
        'priorityLevels[0].spec.type: Unsupported value: "": supported values: "Exempt", "Limited"',
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (5, "5"),
        (-1, "-1"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (2.5, "2.5"),
        (61.0, "61"),
        (float("inf"), "+Inf"),
        ("abc", '"abc"'),
        ('say "hi"', '"say \\"hi\\""'),
        (["*", "get"], '[]string{"*", "get"}'),
        ([], "[]string{}"),
        ([1, "a"], '[1, "a"]'),
        ({"kind": "User"}, '{"kind": "User"}'),
    ],
)
def test_values_are_printed_as_go_prints_them(value: object, text: str) -> None:
    assert go_value(value) == text


def test_problems_under_a_bad_value_are_dropped() -> None:
    problems = Problems()
    problems.wrong_type("a.b", "x", "must be a mapping")
    problems.required("a.b.c")
    problems.required("a.b[0]")
    problems.required("a.bc")
    problems.required("a")
    assert [str(p) for p in problems.items] == [
        'a.b: Invalid value: "x": must be a mapping',
        "a.bc: Required value",
        "a: Required value",
    ]


def test_subdomain_and_label_messages() -> None:
    assert dns1123_subdomain_errors("a.b-c") == []
    assert dns1123_subdomain_errors("a" * 253) == []
    assert dns1123_subdomain_errors("a" * 254) == ["must be no more than 253 characters"]
    assert dns1123_label_errors("a" * 63) == []
    assert dns1123_label_errors("a.b") == [
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    ]
    assert dns1123_subdomain_errors("x\n") != []  # no trailing-newline loophole


@pytest.mark.parametrize(
    ("deck", "hand", "bits"),
    [
        (512, 4, 36),
        (10**7, 2, 47),
        (128, 6, 42),
        (1024, 6, 60),
        (512, 8, 72),
        (128, 10, 70),
        (2**26, 2, 52),
    ],
)
def test_required_entropy_bits(deck: int, hand: int, bits: int) -> None:
    assert required_entropy_bits(deck, hand) == bits


@pytest.mark.parametrize("url", ["/", "/foo", "/apis/", "/healthz/*", "/*"])
def test_valid_non_resource_urls(url: str) -> None:
    assert non_resource_url_error(url) is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must not be empty"),
        ("foo", "must start with slash"),
        ("//", "must not contain double slash"),
        ("/healthz/foo bar", "must not contain white-space"),
        ("/health*", "wildcard can only do suffix matching"),
        ("/*/*", "wildcard can only do suffix matching"),
    ],
)
def test_invalid_non_resource_urls(url: str, message: str) -> None:
    assert non_resource_url_error(url) == message


def test_http_verbs_are_accepted_only_in_non_resource_rules() -> None:
    rule = {"subjects": [{"kind": "Group", "group": {"name": "*"}}]}
    schema = {"name": "web", "priorityLevelConfiguration": {"name": "catch-all"}}
    verbs = ["get", "head", "post", "put", "patch", "delete", "options", "connect", "trace"]
    ok = load_config(
        {
            "flowSchemas": [
                schema
                | {
                    "rules": [
                        rule | {"nonResourceRules": [{"verbs": verbs, "nonResourceURLs": ["/"]}]}
                    ]
                }
            ]
        }
    )
    assert ok.flow_schema("web").rules[0].non_resource_rules[0].verbs == tuple(verbs)
    resource_rule = {
        "verbs": ["head"],
        "apiGroups": ["*"],
        "resources": ["*"],
        "clusterScope": True,
    }
    assert problems_of(
        {"flowSchemas": [schema | {"rules": [rule | {"resourceRules": [resource_rule]}]}]}
    ) == [
        'flowSchemas[web].rules[0].resourceRules[0].verbs: Unsupported value: []string{"head"}: '
        'supported values: "create", "delete", "deletecollection", "get", "list", "patch", '
        '"proxy", "update", "watch"'
    ]
