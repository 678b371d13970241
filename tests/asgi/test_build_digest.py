"""build_digest fills every field of the digest, as RequestDigest(...) would."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from apf_limiter import RequestDigest
from apf_limiter.asgi import Identity, ResourceAttributes, WorkEstimate
from apf_limiter.asgi._identity import build_digest


def _scope(**overrides: Any) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "PATCH",
        "path": "/app/items/7",
        "root_path": "/app",
        "headers": [(b"x-tenant", b"acme")],
        "client": ("10.0.0.9", 4321),
    }
    scope.update(overrides)
    return scope


def _fields(digest: RequestDigest) -> dict[str, Any]:
    fields = {f.name: getattr(digest, f.name) for f in dataclasses.fields(RequestDigest)}
    fields["headers"] = dict(digest.headers)
    return fields


def test_anonymous_non_resource_request() -> None:
    digest = build_digest(_scope(), None, None, None)
    assert type(digest) is RequestDigest
    assert _fields(digest) == _fields(
        RequestDigest(
            user="system:anonymous",
            groups=("system:unauthenticated",),
            verb="patch",
            path="/items/7",
            client="10.0.0.9",
            headers={"x-tenant": "acme"},
        )
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        digest.user = "mallory"  # type: ignore[misc]


def test_identified_resource_request_with_an_estimate() -> None:
    digest = build_digest(
        _scope(method="Purge", client=None),
        Identity("alice", ("admins",)),
        ResourceAttributes("reports", namespace="acme", subresource="status", name="q3"),
        WorkEstimate(3, final_seats=2, additional_latency=0.5),
    )
    assert _fields(digest) == _fields(
        RequestDigest(
            user="alice",
            groups=("admins", "system:authenticated"),
            verb="purge",
            path="/items/7",
            resource="reports",
            subresource="status",
            namespace="acme",
            name="q3",
            headers={"x-tenant": "acme"},
            seats=3,
            final_seats=2,
            additional_latency=0.5,
        )
    )
    assert type(digest.groups) is tuple


def test_groups_given_as_a_list_end_up_a_tuple() -> None:
    groups = ["admins", "system:authenticated"]
    try:
        identity = Identity("alice", groups)  # type: ignore[arg-type]
    except TypeError:
        return  # the compiled build enforces the annotation: no list gets this far
    digest = build_digest(_scope(), identity, None, None)
    assert digest.groups == ("admins", "system:authenticated")
    assert type(digest.groups) is tuple
    hash(digest)  # a digest with a list inside would not hash


def test_websocket_verbs() -> None:
    scope = _scope(type="websocket")
    del scope["method"]
    assert build_digest(scope, None, None, None).verb == "get"
    watched = build_digest(scope, None, ResourceAttributes("events"), None)
    assert watched.verb == "watch"
