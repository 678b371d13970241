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
