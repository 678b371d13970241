"""Configurations of the jobs tests, written in the ``jobs`` short form."""

from __future__ import annotations

from typing import Any

from tests.helpers import limit_response


def jobs_config(
    *,
    limit: int = 2,
    reject: bool = False,
    queues: int = 1,
    hand_size: int = 1,
    queue_length_limit: int = 10,
    wait_limit: float = 15.0,
) -> dict[str, Any]:
    """One level ``jobs`` of exactly ``limit`` seats; reports and exports, a flow per tenant."""
    response = limit_response(reject, queues, hand_size, queue_length_limit)
    return {
        "serverConcurrencyLimit": limit,
        "requestWaitLimit": wait_limit,
        "priorityLevels": [
            {
                "name": "jobs",
                "limited": {"nominalConcurrencyShares": 10000, "limitResponse": response},
            }
        ],
        "flowSchemas": [
            {
                "name": "jobs",
                "priorityLevelConfiguration": {"name": "jobs"},
                "jobs": {"kinds": ["report", "export"]},
                "distinguisherMethod": {"type": "ByTenant"},
            }
        ],
    }
