"""Configuration builders shared by the tests."""

from __future__ import annotations

from typing import Any

EVERYONE_EVERYTHING: list[dict[str, Any]] = [
    {
        "subjects": [{"kind": "Group", "group": {"name": "*"}}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        "resourceRules": [
            {
                "verbs": ["*"],
                "apiGroups": ["*"],
                "resources": ["*"],
                "namespaces": ["*"],
                "clusterScope": True,
            }
        ],
    }
]


def limit_response(
    reject: bool, queues: int, hand_size: int, queue_length_limit: int
) -> dict[str, Any]:
    """A level's ``limitResponse``: ``Reject``, or ``Queue`` with this queuing."""
    if reject:
        return {"type": "Reject"}
    return {
        "type": "Queue",
        "queuing": {
            "queues": queues,
            "handSize": hand_size,
            "queueLengthLimit": queue_length_limit,
        },
    }


def single_level_config(
    *,
    limit: int = 1,
    queues: int = 1,
    hand_size: int = 1,
    queue_length_limit: int = 10,
    reject: bool = False,
    wait_limit: float = 15.0,
    distinguisher: str = "ByUser",
    borrowing_period: float = 10.0,
) -> dict[str, Any]:
    """One limited level ``test`` whose current limit is exactly ``limit`` seats.

    The level has 10000 shares beside catch-all's 5, so its nominal limit is ``limit`` (for
    ``limit`` up to 2000) and, with nothing lendable, borrowing never moves it.
    """
    response = limit_response(reject, queues, hand_size, queue_length_limit)
    return {
        "serverConcurrencyLimit": limit,
        "requestWaitLimit": wait_limit,
        "borrowingPeriod": borrowing_period,
        "priorityLevels": [
            {
                "name": "test",
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 10000,
                    "lendablePercent": 0,
                    "limitResponse": response,
                },
            }
        ],
        "flowSchemas": [
            {
                "name": "test",
                "priorityLevelConfiguration": {"name": "test"},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": distinguisher},
                "rules": EVERYONE_EVERYTHING,
            }
        ],
    }


def limited_level(
    name: str,
    shares: int,
    *,
    lendable: int = 0,
    borrowing: int | None = None,
    reject: bool = False,
    queues: int = 10,
    hand_size: int = 2,
    queue_length_limit: int = 10,
) -> dict[str, Any]:
    """A short-form limited level."""
    limited: dict[str, Any] = {
        "nominalConcurrencyShares": shares,
        "lendablePercent": lendable,
        "limitResponse": {"type": "Reject"}
        if reject
        else {
            "type": "Queue",
            "queuing": {
                "queues": queues,
                "handSize": hand_size,
                "queueLengthLimit": queue_length_limit,
            },
        },
    }
    if borrowing is not None:
        limited["borrowingLimitPercent"] = borrowing
    return {"name": name, "type": "Limited", "limited": limited}


def subject_schema(
    name: str, level: str, *, user: str = "", group: str = "", precedence: int = 100
) -> dict[str, Any]:
    """A short-form flow schema (ByUser) matching one user or one group, on every path."""
    subject = (
        {"kind": "User", "user": {"name": user}}
        if user
        else {"kind": "Group", "group": {"name": group}}
    )
    return {
        "name": name,
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [
            {
                "subjects": [subject],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }
        ],
    }
