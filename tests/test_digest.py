"""RequestDigest is a frozen dataclass, whatever the construction shortcut inside."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pickle
from typing import Any

import pytest

from apf_limiter import RequestDigest
from tests.helpers import single_level_config


def test_fields_defaults_and_resource_flag() -> None:
    digest = RequestDigest()
    assert (digest.user, digest.groups, digest.verb, digest.path) == (
        "system:anonymous",
        (),
        "get",
        "/",
    )
    assert dict(digest.headers) == {}
    assert digest.seats is None and digest.final_seats == 0 and digest.additional_latency == 0
    assert not digest.is_resource_request
    assert RequestDigest(resource="pods").is_resource_request
    assert [f.name for f in dataclasses.fields(RequestDigest)] == list(RequestDigest.__slots__)


def test_frozen_equality_hash_replace_pickle_copy() -> None:
    digest = RequestDigest("alice", ("team",), "post", "/x", headers={"x-tenant": "t1"})
    assert dataclasses.is_dataclass(digest)
    with pytest.raises(dataclasses.FrozenInstanceError):
        digest.user = "mallory"  # type: ignore[misc]
    same = RequestDigest(user="alice", groups=("team",), verb="post", path="/x")
    assert digest == same and hash(digest) == hash(same)  # headers do not take part
    assert digest != dataclasses.replace(digest, user="bob")
    assert dataclasses.replace(digest, user="bob").headers == {"x-tenant": "t1"}
    assert pickle.loads(pickle.dumps(digest)) == digest
    assert copy.copy(digest) == digest and type(copy.deepcopy(digest)) is RequestDigest
    assert type(digest) is RequestDigest and isinstance(digest, RequestDigest)
    assert "alice" in repr(digest)


def test_groups_are_a_tuple_of_strings() -> None:
    digest = RequestDigest(groups=["a", "b"])  # type: ignore[arg-type]
    assert digest.groups == ("a", "b")
    hash(digest)  # hashable once coerced
    with pytest.raises(TypeError, match="sequence of group names"):
        RequestDigest(groups="admin")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="strings"):
        RequestDigest(groups=[1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"seats": 2.0}, "seats must be an integer of at least 1"),
        ({"seats": 2.5}, "seats must be an integer of at least 1"),
        ({"seats": 0}, "seats must be an integer of at least 1"),
        ({"seats": -3}, "seats must be an integer of at least 1"),
        ({"seats": True}, "seats must be an integer of at least 1"),
        ({"seats": "2"}, "seats must be an integer of at least 1"),
        ({"final_seats": 2.5, "additional_latency": 1}, "final_seats must be a non-negative"),
        ({"final_seats": -3}, "final_seats must be a non-negative"),
        ({"additional_latency": -1}, "additional_latency must not be negative"),
        ({"additional_latency": float("nan")}, "additional_latency must be a number"),
        ({"additional_latency": float("inf")}, "additional_latency must be a number"),
        ({"additional_latency": "1"}, "additional_latency must be a number"),
        ({"additional_latency": True}, "additional_latency must be a number"),
    ],
)
def test_work_estimate_fields_are_checked_at_construction(
    fields: dict[str, object], message: str
) -> None:
    # Caught here, not deep in the engine: a float seat count used to be admitted, then
    # break its level's virtual clock at release (TypeError) and keep its seats forever.
    with pytest.raises(ValueError, match=message):
        RequestDigest(**fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(RequestDigest(), **fields)  # type: ignore[arg-type]


def test_valid_work_estimates_are_kept() -> None:
    digest = RequestDigest(seats=3, final_seats=2, additional_latency=1)
    assert (digest.seats, digest.final_seats, digest.additional_latency) == (3, 2, 1)
    assert RequestDigest(additional_latency=0).additional_latency == 0


def _tenant_config() -> dict[str, Any]:
    """Schema ``reads`` (``get`` of ``/reports/*``, fair by ``X-Tenant``), 1 seat, catch-all."""
    config = single_level_config(
        limit=1, queues=4, hand_size=2, queue_length_limit=5, distinguisher="ByHeader"
    )
    schema = config["flowSchemas"][0]
    schema["name"] = "reads"
    schema["distinguisherMethod"]["header"] = "X-Tenant"
    schema["rules"] = [
        {
            "subjects": [{"kind": "Group", "group": {"name": "*"}}],
            "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/reports/*"]}],
        }
    ]
    return config


async def test_http_spellings_classify_like_the_rules_spell_them() -> None:
    # "GET" used to miss a `verbs: [get]` rule and fall silently to catch-all; "X-Tenant" gave
    # an empty distinguisher, so every tenant shared one flow.
    from apf_limiter import Limiter
    from apf_limiter.testing import FakeClock

    limiter = Limiter(_tenant_config(), clock=FakeClock())
    digest = RequestDigest(
        user="alice", verb="GET", path="/reports/1", headers={"X-Tenant": "acme"}
    )
    assert digest.verb == "get" and dict(digest.headers) == {"x-tenant": "acme"}
    admission = limiter.admit(digest)
    assert admission.start()
    assert (admission.flow_schema, admission.distinguisher) == ("reads", "acme")
    admission.release()
    already = {"x-tenant": "acme"}
    assert RequestDigest(headers=already).headers is already  # nothing to copy


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"verb": ""}, "verb must be one word"),
        ({"verb": "get pods"}, "verb must be one word"),
        ({"verb": b"get"}, "verb must be a string"),
        ({"path": "reports/1"}, "path must be a URL path starting with '/'"),
        ({"path": "https://example.com/x"}, "path must be a URL path"),
        ({"headers": {"X-Tenant": "a", "x-tenant": "b"}}, "given twice"),
        ({"headers": {"x-tenant": b"acme"}}, "values must be strings"),
        ({"headers": {"": "x"}}, "header names must be non-empty strings"),
        ({"headers": {"x tenant": "x"}}, "header names must be non-empty strings"),
        ({"headers": [("x-tenant", "a")]}, "headers must be a mapping"),
    ],
)
def test_values_that_cannot_be_meant_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RequestDigest(**fields)  # type: ignore[arg-type]


async def test_repr_and_logs_never_show_header_values_but_the_distinguishers() -> None:
    # repr(request.state.apf.digest) goes to access logs: bearer tokens and cookies showed.
    import logging

    from apf_limiter import Limiter, Rejected
    from apf_limiter.testing import FakeClock

    secret = "Bearer s3cr3t-t0ken"
    digest = RequestDigest(
        user="alice",
        path="/reports/1",
        headers={"Authorization": secret, "Cookie": "session=c00kie", "X-Tenant": "acme"},
    )
    before = repr(digest)
    assert "s3cr3t" not in before and "c00kie" not in before
    assert "'authorization': ..." in before and "'cookie': ..." in before
    limiter = Limiter(_tenant_config(), clock=FakeClock())  # classifies by X-Tenant
    text = repr(digest)
    assert "'x-tenant': 'acme'" in text and "s3cr3t" not in text
    assert text.startswith("RequestDigest(user='alice', groups=(), verb='get', path='/reports/1'")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    logger = logging.getLogger("apf_limiter")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        admissions = []
        for _ in range(200):  # fill the queues, then get rejected
            admission = limiter.admit(digest)
            with contextlib.suppress(Rejected):
                admission.start()
            admissions.append(admission)
            assert "s3cr3t" not in repr(admission)
        for admission in admissions:
            admission.release()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert any("rejected" in record.getMessage() for record in records)
    for record in records:
        assert "s3cr3t" not in record.getMessage() and "s3cr3t" not in str(record.__dict__)
