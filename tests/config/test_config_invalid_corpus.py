"""The corpus of invalid configurations under tests/data/invalid/.

Each file starts with a ``# rule:`` comment saying what it breaks and one ``# expect:`` comment
per problem, in order: the exact ``str(ConfigProblem)`` (field path and Kubernetes message).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apf_limiter._errors import ConfigError
from apf_limiter.config._sources import load_config

INVALID = Path(__file__).parent.parent / "data" / "invalid"
CORPUS = sorted(INVALID.glob("*.yaml"))


def expected_problems(path: Path) -> list[str]:
    prefix = "# expect: "
    return [
        line[len(prefix) :]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(prefix)
    ]


def actual_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return [str(problem) for problem in caught.value.problems]


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_every_problem_is_reported_exactly(path: Path) -> None:
    expected = expected_problems(path)
    assert expected, f"{path.name} has no '# expect:' lines"
    assert actual_problems(path) == expected


# Every message of every validation rule, as a regular expression over "path: message".
RULES: tuple[str, ...] = (
    # Priority levels.
    r"\.type: Invalid value: \"\w+\": type must be 'Exempt' if and only if name is 'exempt'$",
    r"\.type: Unsupported value: \"\w*\": supported values: \"Exempt\", \"Limited\"$",
    r"\.limited: Forbidden: must be nil if the type is not Limited$",
    r"\.exempt: Forbidden: must be nil if the type is Limited$",
    r"\.limited: Required value: must not be empty when type is Limited$",
    r"\.exempt\.nominalConcurrencyShares: Invalid value: -\d+: must be a non-negative integer$",
    r"\.exempt\.lendablePercent: Invalid value: -?\d+: must be between 0 and 100, inclusive$",
    r"\.limited\.nominalConcurrencyShares: Invalid value: -\d+: must be a non-negative integer$",
    r"\.limited\.assuredConcurrencyShares: Invalid value: -?\d+: must be positive$",
    r"\.limited\.lendablePercent: Invalid value: -?\d+: must be between 0 and 100, inclusive$",
    r"\.borrowingLimitPercent: Invalid value: -\d+: if specified, must be a non-negative integer$",
    r"\.limitResponse\.type: Unsupported value: \"\w*\": supported values: \"Queue\", \"Reject\"$",
    r"\.queuing: Required value: must not be empty if limited\.limitResponse\.type is Limited$",
    r"\.queuing: Forbidden: must be nil if limited\.limitResponse\.type is not Limited$",
    r"\.queueLengthLimit: Invalid value: -?\d+: must be positive$",
    r"\.queues: Invalid value: -?\d+: must be positive$",
    r"\.queues: Invalid value: \d+: must not be greater than 10000000$",
    r"\.handSize: Invalid value: -?\d+: must be positive$",
    r"\.handSize: Invalid value: \d+: should not be greater than queues \(\d+\)$",
    r"\.handSize: Invalid value: \d+: required entropy bits of deckSize \d+ and handSize \d+ "
    r"should not be greater than 60$",
    r"\.metadata\.annotations: Forbidden: annotation "
    r"'flowcontrol\.k8s\.io/v1beta3-preserve-zero-concurrency-shares' is forbidden$",
    r"^priorityLevels\[catch-all\](\.spec)?: Invalid value: spec of 'catch-all' must equal the "
    r"fixed value$",
    r"^priorityLevels\[exempt\](\.spec)?: Invalid value: spec of 'exempt' except the "
    r"'spec\.exempt' field must equal the fixed value$",
    # Object names and metadata (both kinds share them).
    r"\.name: Required value: name or generateName is required$",
    r"\.name: Invalid value: \"[^\"]*\": a lowercase RFC 1123 subdomain must consist of lower "
    r"case alphanumeric characters, '-' or '\.', and must start and end with an alphanumeric "
    r"character \(e\.g\. 'example\.com', regex used for validation is "
    r"'\[a-z0-9\]\(\[-a-z0-9\]\*\[a-z0-9\]\)\?\(\\\.\[a-z0-9\]\(\[-a-z0-9\]\*\[a-z0-9\]\)\?\)\*'\)$",
    r"\.name: Invalid value: \"[^\"]*\": must be no more than 253 characters$",
    r"\.apiVersion: Unsupported value: \"[^\"]+\": supported values: "
    r"\"flowcontrol\.apiserver\.k8s\.io/v1\", ",
    r"\.apiVersion: Required value$",
    r"\.kind: Unsupported value: \"\w+\": supported values: \"PriorityLevelConfiguration\"$",
    r"\.kind: Required value$",
    r"^priorityLevels\[[\w-]+\]\.status\.conditions\[\d+\]\.type: Required value: "
    r"must not be empty$",
    r"^priorityLevels\[[\w-]+\]\.status\.conditions\[\d+\]\.type: Duplicate value: \"\w+\"$",
    # Flow schemas.
    r"\.matchingPrecedence: Invalid value: -\d+: must be a positive value$",
    r"\.matchingPrecedence: Invalid value: \d+: must not be greater than 10000$",
    r"\.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have "
    r"matchingPrecedence 1$",
    r"\.distinguisherMethod\.type: Unsupported value: \"\w+\": supported values: "
    r"\"ByClientIP\", \"ByHeader\", \"ByNamespace\", \"ByTenant\", \"ByUser\"$",
    r"\.distinguisherMethod\.header: Required value: must be set when type is 'ByHeader'$",
    # The jobs short form of a rule.
    r"\.jobs\.kinds: Required value: must list at least one kind of job \(or '\*'\)$",
    r"\.jobs\.kinds: Invalid value: \[\]string\{.*\}: if '\*' is present, must not list others$",
    r"\.jobs\.kinds\[\d+\]: Invalid value: \"[^\"]+\": must not contain '/', '\*' or "
    r"white-space$",
    r"\.jobs\.tenants: Invalid value: \[\]string\{.*\}: if '\*' is present, must not list "
    r"others$",
    r"\.jobs\.tenants\[\d+\]: Invalid value: \"[^\"]+\": each member of this list must be "
    r"'\*' or a DNS-1123 label; a lowercase RFC 1123 label must consist",
    r"\.distinguisherMethod\.header: Invalid value: \"[^\"]+\": must be a valid HTTP header "
    r"name \(an RFC 9110 token\)$",
    r"\.distinguisherMethod\.header: Forbidden: must be empty unless type is 'ByHeader'$",
    r"\.priorityLevelConfiguration\.name: Required value: must reference a priority level$",
    r"\.priorityLevelConfiguration\.name: Invalid value: \"[^\"]+\": a lowercase RFC 1123 "
    r"subdomain must consist",
    r"\.subjects: Required value: subjects must contain at least one value$",
    r"\.rules\[\d+\]: Required value: at least one of resourceRules and nonResourceRules has to "
    r"be non-empty$",
    r"\.serviceAccount: Required value: serviceAccount is required when subject kind is "
    r"'ServiceAccount'$",
    r"\.serviceAccount\.name: Required value$",
    r"\.serviceAccount\.name: Invalid value: \"[^\"]+\": a lowercase RFC 1123 subdomain",
    r"\.serviceAccount\.namespace: Required value: must specify namespace for service account$",
    r"\.serviceAccount\.namespace: Invalid value: \"[^\"]+\": a lowercase RFC 1123 label must "
    r"consist of lower case alphanumeric characters or '-', and must start and end with an "
    r"alphanumeric character \(e\.g\. 'my-name',  or '123-abc', regex used for validation is "
    r"'\[a-z0-9\]\(\[-a-z0-9\]\*\[a-z0-9\]\)\?'\)$",
    r"\.user: Required value: user is required when subject kind is 'User'$",
    r"\.user\.name: Required value$",
    r"\.group: Required value: group is required when subject kind is 'Group'$",
    r"\.group\.name: Required value$",
    r"\.user: Forbidden: user is forbidden when subject kind is not 'User'$",
    r"\.group: Forbidden: group is forbidden when subject kind is not 'Group'$",
    r"\.serviceAccount: Forbidden: serviceAccount is forbidden when subject kind is not "
    r"'ServiceAccount'$",
    r"\.kind: Unsupported value: \"\w*\": supported values: \"Group\", \"ServiceAccount\", "
    r"\"User\"$",
    r"resourceRules\[\d+\]\.verbs: Required value: verbs must contain at least one value$",
    r"resourceRules\[\d+\]\.verbs: Invalid value: \[\]string\{.*\}: if '\*' is present, must "
    r"not specify other verbs$",
    r"\.resourceRules\[\d+\]\.verbs: Unsupported value: \[\]string\{.*\}: supported values: "
    r"\"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", "
    r"\"update\", \"watch\"$",
    r"\.nonResourceRules\[\d+\]\.verbs: Unsupported value: \[\]string\{.*\}: supported values: "
    r"\"connect\", \"create\", \"delete\", \"deletecollection\", \"get\", \"head\", \"list\", "
    r"\"options\", \"patch\", \"post\", \"proxy\", \"put\", \"trace\", \"update\", \"watch\"$",
    r"nonResourceRules\[\d+\]\.verbs: Required value: verbs must contain at least one value$",
    r"nonResourceRules\[\d+\]\.verbs: Invalid value: \[\]string\{.*\}: if '\*' is present, "
    r"must not specify other verbs$",
    r"\.apiGroups: Required value: resource rules must supply at least one api group$",
    r"\.apiGroups: Invalid value: \[\]string\{.*\}: if '\*' is present, must not specify other "
    r"api groups$",
    r"\.resources: Required value: resource rules must supply at least one resource$",
    r"\.resources: Invalid value: \[\]string\{.*\}: if '\*' is present, must not specify other "
    r"resources$",
    r"\.namespaces: Required value: resource rules that are not cluster scoped must supply at "
    r"least one namespace$",
    r"\.namespaces: Invalid value: \[\]string\{.*\}: if '\*' is present, must not specify other "
    r"namespaces$",
    r"\.namespaces\[\d+\]: Invalid value: \"[^\"]+\": each member of this list must be '\*' or "
    r"a DNS-1123 label; a lowercase RFC 1123 label must consist",
    r"\.namespaces\[\d+\]: Invalid value: \"[^\"]+\": each member of this list must be '\*' or "
    r"a DNS-1123 label; must be no more than 63 characters$",
    r"\.nonResourceURLs: Required value: nonResourceURLs must contain at least one value$",
    r"\.nonResourceURLs: Invalid value: \[\]string\{.*\}: if '\*' is present, must not specify "
    r"other non-resource URLs$",
    r"\.nonResourceURLs\[\d+\]: Invalid value: \"\": must not be empty$",
    r"\.nonResourceURLs\[\d+\]: Invalid value: \"[^\"]+\": must start with slash$",
    r"\.nonResourceURLs\[\d+\]: Invalid value: \"[^\"]+\": must not contain white-space$",
    r"\.nonResourceURLs\[\d+\]: Invalid value: \"[^\"]+\": must not contain double slash$",
    r"\.nonResourceURLs\[\d+\]: Invalid value: \"[^\"]+\": wildcard can only do suffix matching$",
    r"^flowSchemas\[exempt\](\.spec)?: Invalid value: spec of 'exempt' must equal the fixed "
    r"value$",
    r"^flowSchemas\[catch-all\](\.spec)?: Invalid value: spec of 'catch-all' must equal the "
    r"fixed value$",
    r"^flowSchemas\[[\w-]+\]\.status\.conditions\[\d+\]\.type: Required value: must not be "
    r"empty$",
    r"^flowSchemas\[[\w-]+\]\.status\.conditions\[\d+\]\.type: Duplicate value: \"\w+\"$",
    # Checks a whole configuration needs.
    r"^priorityLevels\[[\w-]+\]: Duplicate value: \"[\w-]+\"$",
    r"^flowSchemas\[[\w-]+\]: Duplicate value: \"[\w-]+\"$",
    r"\.priorityLevelConfiguration\.name: Not found: \"[\w-]+\": no priority level has this "
    r"name \(did you mean \"[\w-]+\"\?\)$",
    r"\.priorityLevelConfiguration\.name: Not found: \"[\w-]+\": no priority level has this "
    r"name$",
    r"\.\w+: Unknown field: did you mean \"\w+\"\?$",
    r"\.\w+: Unknown field$",
    r"^\w+: Unknown field: did you mean \"\w+\"\?$",
    r": Invalid value: .*: must be an integer$",
    r": Invalid value: .*: must fit in a 32-bit signed integer$",
    r": Invalid value: .*: must be a number$",
    r": Invalid value: .*: must be a finite number$",
    r": Invalid value: .*: must be a string$",
    r": Invalid value: .*: must be a boolean$",
    r": Invalid value: .*: must be a mapping$",
    r": Invalid value: .*: must be a list$",
    r": Invalid value: .*: must be a list of strings$",
    # Settings and documents.
    r"^serverConcurrencyLimit: Invalid value: -?\d+: must be positive$",
    r"^requestWaitLimit: Invalid value: -?[\d.]+: must be positive$",
    r"^requestWaitLimit: Invalid value: [\d.]+: must not be greater than 60$",
    r"^borrowingPeriod: Invalid value: -?[\d.]+: must be positive$",
    r"^documents\[\d+\]: Forbidden: at most one document may hold apf_limiter settings",
    r"^documents\[\d+\]\.kind: Unsupported value: \"\w+\": supported values: \"FlowSchema\", "
    r"\"PriorityLevelConfiguration\"$",
    r"\.items\[\d+\]\.kind: Required value: must be one of \"FlowSchema\", "
    r"\"PriorityLevelConfiguration\"$",
)


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_is_covered_by_the_corpus(rule: str) -> None:
    pattern = re.compile(rule)
    problems = [problem for path in CORPUS for problem in expected_problems(path)]
    assert any(pattern.search(problem) for problem in problems), rule


def test_a_multi_error_file_reports_problems_of_every_object() -> None:
    problems = actual_problems(INVALID / "49-multi-error-kubectl-list.yaml")
    objects = {problem.split("]", 1)[0] + "]" for problem in problems}
    assert objects == {
        "priorityLevels[workload-high]",
        "priorityLevels[workload-low]",
        "flowSchemas[service-accounts]",
    }
    assert len(problems) >= 3


def test_a_new_users_three_mistakes_are_all_reported_with_paths() -> None:
    assert actual_problems(INVALID / "48-new-user-three-mistakes.yaml") == [
        "priorityLevels[workload-high].limited.limitResponse.queuing.handSize: "
        "Invalid value: 9: should not be greater than queues (8)",
        "flowSchemas[api-users].rules[0].nonResourceRules[0].nonResourceURL: "
        'Unknown field: did you mean "nonResourceURLs"?',
        "flowSchemas[api-users].priorityLevelConfiguration.name: "
        'Not found: "workload-hihg": no priority level has this name '
        '(did you mean "workload-high"?)',
    ]
