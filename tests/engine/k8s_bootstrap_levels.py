"""Kubernetes' mandatory and suggested priority levels (bootstrap/default.go), built by hand.

Kept independent of ``apf_limiter.config._defaults`` so the concurrency math is checked against
the reference table itself.
"""

from __future__ import annotations

from apf_limiter.config._model import (
    ExemptPriorityLevelConfiguration,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    PriorityLevel,
    QueuingConfiguration,
)

__all__ = ["exempt_level", "catch_all_level", "queuing_level", "bootstrap_levels"]


def exempt_level(shares: int = 0, lendable_percent: int = 0) -> PriorityLevel:
    """Return the mandatory ``exempt`` level."""
    return PriorityLevel(
        name="exempt",
        type="Exempt",
        exempt=ExemptPriorityLevelConfiguration(
            nominal_concurrency_shares=shares, lendable_percent=lendable_percent
        ),
    )


def catch_all_level() -> PriorityLevel:
    """Return the mandatory ``catch-all`` level (5 shares, Reject)."""
    return PriorityLevel(
        name="catch-all",
        type="Limited",
        limited=LimitedPriorityLevelConfiguration(
            nominal_concurrency_shares=5,
            lendable_percent=0,
            limit_response=LimitResponse(type="Reject", queuing=None),
        ),
    )


def queuing_level(
    name: str,
    shares: int,
    lendable_percent: int = 0,
    queues: int = 64,
    hand_size: int = 6,
    queue_length_limit: int = 50,
    borrowing_limit_percent: int | None = None,
) -> PriorityLevel:
    """Return a ``Limited``/``Queue`` level."""
    return PriorityLevel(
        name=name,
        type="Limited",
        limited=LimitedPriorityLevelConfiguration(
            nominal_concurrency_shares=shares,
            lendable_percent=lendable_percent,
            borrowing_limit_percent=borrowing_limit_percent,
            limit_response=LimitResponse(
                type="Queue",
                queuing=QueuingConfiguration(
                    queues=queues, hand_size=hand_size, queue_length_limit=queue_length_limit
                ),
            ),
        ),
    )


def bootstrap_levels() -> tuple[PriorityLevel, ...]:
    """Return the eight bootstrap levels in the order of bootstrap/default.go (share sum 245)."""
    return (
        exempt_level(),
        catch_all_level(),
        queuing_level("system", 30, 33, 64, 6, 50),
        queuing_level("node-high", 40, 25, 64, 6, 50),
        queuing_level("leader-election", 10, 0, 16, 4, 50),
        queuing_level("workload-high", 40, 50, 128, 6, 50),
        queuing_level("workload-low", 100, 90, 128, 6, 50),
        queuing_level("global-default", 20, 50, 128, 6, 50),
    )
