"""The ``jobs`` short form: it expands into the Kubernetes rule it stands for, and a Job
digest is classified the same way by either form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apf_limiter import ConfigError, Limiter, RequestDigest, load_config
from apf_limiter._cli import main
from apf_limiter.config import dump_config
from apf_limiter.jobs import Job

SHORT: dict[str, Any] = {
    "priorityLevels": [{"name": "batch", "limited": {"nominalConcurrencyShares": 20}}],
    "flowSchemas": [
        {
            "name": "reports",
            "priorityLevelConfiguration": {"name": "batch"},
            "jobs": {"kinds": ["report", "export"]},
            "distinguisherMethod": {"type": "ByTenant"},
        },
        {
            "name": "acme-audits",
            "priorityLevelConfiguration": {"name": "batch"},
            "matchingPrecedence": 900,
            "jobs": {"kinds": ["audit"], "tenants": ["acme", "globex"]},
        },
    ],
}

LONG: dict[str, Any] = {
    "priorityLevels": SHORT["priorityLevels"],
    "flowSchemas": [
        {
            "name": "reports",
            "priorityLevelConfiguration": {"name": "batch"},
            "distinguisherMethod": {"type": "ByNamespace"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "resourceRules": [
                        {
                            "verbs": ["create"],
                            "apiGroups": ["jobs"],
                            "resources": ["report", "export"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                }
            ],
        },
        {
            "name": "acme-audits",
            "priorityLevelConfiguration": {"name": "batch"},
            "matchingPrecedence": 900,
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "*"}}],
                    "resourceRules": [
                        {
                            "verbs": ["create"],
                            "apiGroups": ["jobs"],
                            "resources": ["audit"],
                            "namespaces": ["acme", "globex"],
                        }
                    ],
                }
            ],
        },
    ],
}

DIGESTS = [
    Job("report", tenant="acme").digest,
    Job("export").digest,  # no tenant: cluster-scoped, matched by the schema without tenants
    Job("audit", tenant="acme").digest,
    Job("audit", tenant="initech").digest,  # not a listed tenant: falls to catch-all
    Job("audit").digest,
    Job("transcode", tenant="acme", user="bob").digest,
    RequestDigest(verb="post", path="/report"),  # an HTTP request is not a job
    RequestDigest(verb="create", resource="report", namespace="acme"),  # the core group
]


def test_the_short_form_loads_as_the_long_form() -> None:
    short, long = load_config(SHORT), load_config(LONG)
    assert short == long
    # The dump holds the expansion: ordinary Kubernetes objects, loadable anywhere.
    dumped = dump_config(short, form="kubernetes")
    assert dumped == dump_config(long, form="kubernetes")
    assert "jobs" not in dumped["flowSchemas"][0]["spec"]  # type: ignore[index]
    assert load_config(dump_config(short)) == short


def test_a_job_is_classified_the_same_by_either_form() -> None:
    short, long = Limiter(SHORT, hash_seed=7), Limiter(LONG, hash_seed=7)
    expected = [
        ("reports", "batch"),
        ("reports", "batch"),
        ("acme-audits", "batch"),
        ("catch-all", "catch-all"),
        ("catch-all", "catch-all"),
        ("catch-all", "catch-all"),
        ("catch-all", "catch-all"),
        ("catch-all", "catch-all"),
    ]
    assert [short.classify(d) for d in DIGESTS] == expected
    assert [long.classify(d) for d in DIGESTS] == expected


async def test_by_tenant_gives_each_tenant_its_flow() -> None:
    limiter = Limiter(SHORT, hash_seed=7)
    for tenant in ("acme", "globex"):
        async with limiter.admit(Job("report", tenant=tenant).digest) as admission:
            assert admission.distinguisher == tenant


def test_show_prints_the_expansion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "jobs.json"
    file.write_text(json.dumps(SHORT))
    assert main(["show", str(file)]) == 0
    text = capsys.readouterr().out
    assert "create report,export group jobs (ns * + cluster-scoped)" in text
    assert "create audit group jobs (ns acme,globex)" in text
    assert "ByNamespace" in text


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        (
            {"kinds": []},
            "flowSchemas[reports].jobs.kinds: Required value: must list at least one kind of "
            "job (or '*')",
        ),
        (
            {"kinds": ["report/logs"]},
            'flowSchemas[reports].jobs.kinds[0]: Invalid value: "report/logs": must not '
            "contain '/', '*' or white-space",
        ),
        (
            {"kinds": ["*", "report"]},
            'flowSchemas[reports].jobs.kinds: Invalid value: []string{"*", "report"}: '
            "if '*' is present, must not list others",
        ),
        (
            {"kinds": ["report"], "tenant": ["acme"]},
            'flowSchemas[reports].jobs.tenant: Unknown field: did you mean "tenants"?',
        ),
        (
            {"kinds": ["report"], "tenants": ["Acme"]},
            'flowSchemas[reports].jobs.tenants[0]: Invalid value: "Acme": each member of this '
            "list must be '*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of",
        ),
        ("report", 'flowSchemas[reports].jobs: Invalid value: "report": must be a mapping'),
    ],
)
def test_a_bad_jobs_block_is_reported_at_its_field_path(jobs: object, expected: str) -> None:
    config = {**SHORT, "flowSchemas": [{**SHORT["flowSchemas"][0], "jobs": jobs}]}
    with pytest.raises(ConfigError) as error:
        load_config(config)
    problems = [str(problem) for problem in error.value.problems]
    assert any(problem.startswith(expected) for problem in problems), problems


def test_the_full_object_form_takes_jobs_in_its_spec() -> None:
    entry = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "reports"},
        "spec": {
            "priorityLevelConfiguration": {"name": "batch"},
            "jobs": {"kinds": ["report", "export"]},
            "distinguisherMethod": {"type": "ByTenant"},
        },
    }
    config = load_config({**SHORT, "flowSchemas": [entry, SHORT["flowSchemas"][1]]})
    assert config == load_config(LONG)


def test_a_mandatory_schema_cannot_take_jobs() -> None:
    schema = dump_config(load_config({}))["flowSchemas"]
    assert schema == []  # nothing given: the mandatory ones are imagined
    catch_all = {
        "name": "catch-all",
        "priorityLevelConfiguration": {"name": "catch-all"},
        "matchingPrecedence": 10000,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [
            {
                "subjects": [{"kind": "Group", "group": {"name": "system:unauthenticated"}}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }
        ],
        "jobs": {"kinds": ["report"]},
    }
    with pytest.raises(ConfigError, match="spec of 'catch-all' must equal the fixed value"):
        load_config({"flowSchemas": [catch_all]})
