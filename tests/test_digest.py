"""RequestDigest is a frozen dataclass, whatever the construction shortcut inside."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from apf_limiter import RequestDigest


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
