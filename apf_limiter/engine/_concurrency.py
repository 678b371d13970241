"""Concurrency math: the limits Kubernetes derives from a configuration (its "digest").

Every number is computed exactly as Kubernetes computes it, in float64 with the same operation
order (multiply first, then divide) and Go's rounding (half away from zero), so that the limits
match upstream to the seat:

* ``NominalCL = ceil(ServerCL * NCS / shareSum)`` where ``shareSum`` counts every level,
  exempt and quiescing ones included; the nominal limits may add up to a little more than
  ServerCL (``nominal_limit_sum`` is what borrowing distributes);
* ``LendableCL = round(NominalCL * lendablePercent / 100)``;
* ``BorrowingCL = round(NominalCL * borrowingLimitPercent / 100)``, or ServerCL when unset
  (always ServerCL for the exempt level);
* lower limit ``NominalCL - LendableCL``, upper limit ``NominalCL + BorrowingCL``, initial limit
  ``NominalCL - LendableCL // 2``;
* ``maxSeats = max(1, min(ceil(0.15 * NominalCL), NominalCL // handSize))`` for queuing levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from apf_limiter.config._model import Configuration, PriorityLevel
from apf_limiter.engine._seat_seconds import go_round

MAX_SEATS_FRACTION: Final = 0.15
"""Share of a level's nominal limit that one request may occupy at most."""


def nominal_concurrency_limit(server_cl: int, shares: int, share_sum: int) -> int:
    """Return a level's nominal limit, ``ceil(server_cl * shares / share_sum)``.

    Args:
        server_cl: The server concurrency limit (ServerCL).
        shares: The level's nominal concurrency shares (NCS).
        share_sum: The NCS of every level, summed.

    Returns:
        The nominal limit in seats; 0 when ``share_sum`` is 0.
    """
    if share_sum == 0:
        return 0
    return math.ceil(float(server_cl) * float(shares) / float(share_sum))


def lendable_concurrency_limit(nominal: int, lendable_percent: int) -> int:
    """Return the seats a level lends, ``round(nominal * lendable_percent / 100)``."""
    return go_round(float(nominal) * float(lendable_percent) / 100.0)


def borrowing_concurrency_limit(
    nominal: int, borrowing_limit_percent: int | None, server_cl: int
) -> int:
    """Return the seats a level may borrow on top of its nominal limit.

    Args:
        nominal: The level's nominal limit.
        borrowing_limit_percent: The level's borrowing limit percent; ``None`` (unlimited, and
            always for the exempt level) means ServerCL rather than infinity.
        server_cl: The server concurrency limit.

    Returns:
        ``round(nominal * borrowing_limit_percent / 100)``, or ``server_cl`` when unset.
    """
    if borrowing_limit_percent is None:
        return server_cl
    return go_round(float(nominal) * float(borrowing_limit_percent) / 100.0)


def max_seats(nominal: int, hand_size: int) -> int:
    """Return the most seats one request of a queuing level may take.

    ``max(1, min(ceil(0.15 * nominal), nominal // hand_size))``: the nominal limit (not the
    current one) bounds it, so a request never needs more than its level's fair share of queues.
    """
    return max(1, min(math.ceil(MAX_SEATS_FRACTION * nominal), nominal // hand_size))


@dataclass(frozen=True, slots=True)
class LevelPlan:
    """The limits of one priority level under one configuration.

    Attributes:
        name: The level's name.
        type: ``"Exempt"`` or ``"Limited"``.
        limit_response: ``"Queue"`` or ``"Reject"`` for limited levels, ``""`` for exempt.
        nominal_concurrency_shares: The level's NCS.
        lendable_percent: The level's lendable percent.
        borrowing_limit_percent: The level's borrowing limit percent (``None`` = unlimited).
        nominal_limit: NominalCL.
        lendable_limit: LendableCL.
        borrowing_limit: BorrowingCL.
        lower_limit: MinCL, ``nominal_limit - lendable_limit``.
        upper_limit: MaxCL, ``nominal_limit + borrowing_limit``.
        initial_limit: The current limit a new level starts with,
            ``nominal_limit - lendable_limit // 2``.
        max_seats: The most seats one request may take; 0 for exempt and ``Reject`` levels.
        queues: Number of queues; 0 when the level does not queue.
        hand_size: Hand size; 0 when the level does not queue.
        queue_length_limit: Queue length limit; 0 when the level does not queue.
    """

    name: str
    type: Literal["Exempt", "Limited"]
    limit_response: Literal["Queue", "Reject", ""]
    nominal_concurrency_shares: int
    lendable_percent: int
    borrowing_limit_percent: int | None
    nominal_limit: int
    lendable_limit: int
    borrowing_limit: int
    lower_limit: int
    upper_limit: int
    initial_limit: int
    max_seats: int
    queues: int
    hand_size: int
    queue_length_limit: int

    @property
    def is_exempt(self) -> bool:
        """Whether the level is exempt from limiting."""
        return self.type == "Exempt"

    @property
    def is_queuing(self) -> bool:
        """Whether the level holds requests in queues (a ``Queue``-type limited level)."""
        return self.limit_response == "Queue"


@dataclass(frozen=True, slots=True)
class ConfigurationPlan:
    """The limits of every priority level under one configuration.

    Attributes:
        server_concurrency_limit: ServerCL.
        share_sum: The NCS of every level, summed.
        nominal_limit_sum: The nominal limits summed (nominalCLSum); what borrowing distributes.
        levels: One plan per level, in the order the levels were given.
    """

    server_concurrency_limit: int
    share_sum: int
    nominal_limit_sum: int
    levels: tuple[LevelPlan, ...]

    def level(self, name: str) -> LevelPlan:
        """Return the plan of the level named ``name``.

        Raises:
            KeyError: If there is no such level.
        """
        for plan in self.levels:
            if plan.name == name:
                return plan
        raise KeyError(name)

    @property
    def max_executing_requests(self) -> int:
        """The most requests that limited levels can execute at once (exempt ones come on top).

        ``serverConcurrencyLimit`` is a target, not a cap, as in Kubernetes: each level's
        nominal limit is rounded up; borrowing shares out the sum of the nominal limits (the
        exempt levels' included) among the limited levels and rounds each share to the
        nearest seat. So the limited levels' current limits add up to at most the nominal sum
        plus half a seat per limited level, and to at most their upper limits; a level runs at
        most its current limit of one-seat requests.
        """
        limited = [plan for plan in self.levels if not plan.is_exempt]
        rounded = self.nominal_limit_sum + len(limited) // 2
        return min(sum(plan.upper_limit for plan in limited), rounded)

    @property
    def max_waiting_requests(self) -> int:
        """Requests the queues of all levels can hold (``sum(queues * queue_length_limit)``)."""
        return sum(plan.queues * plan.queue_length_limit for plan in self.levels)


def _plan_level(level: PriorityLevel, server_cl: int, share_sum: int) -> LevelPlan:
    shares = level.nominal_concurrency_shares
    lendable_percent = level.lendable_percent
    nominal = nominal_concurrency_limit(server_cl, shares, share_sum)
    lendable = lendable_concurrency_limit(nominal, lendable_percent)
    limit_response: Literal["Queue", "Reject", ""] = ""
    borrowing_limit_percent: int | None = None
    seats = queues = hand_size = queue_length_limit = 0
    if level.is_exempt:
        borrowing = server_cl
    else:
        limited = level.limited
        if limited is None:
            raise ValueError(f"priority level {level.name!r}: a Limited level needs 'limited'")
        borrowing_limit_percent = limited.borrowing_limit_percent
        borrowing = borrowing_concurrency_limit(nominal, borrowing_limit_percent, server_cl)
        limit_response = limited.limit_response.type
        if limit_response == "Queue":
            queuing = limited.limit_response.queuing
            if queuing is None:
                raise ValueError(
                    f"priority level {level.name!r}: a Queue limit response needs 'queuing'"
                )
            queues = queuing.queues
            hand_size = queuing.hand_size
            queue_length_limit = queuing.queue_length_limit
            seats = max_seats(nominal, hand_size)
    return LevelPlan(
        name=level.name,
        type=level.type,
        limit_response=limit_response,
        nominal_concurrency_shares=shares,
        lendable_percent=lendable_percent,
        borrowing_limit_percent=borrowing_limit_percent,
        nominal_limit=nominal,
        lendable_limit=lendable,
        borrowing_limit=borrowing,
        lower_limit=nominal - lendable,
        upper_limit=nominal + borrowing,
        initial_limit=nominal - lendable // 2,
        max_seats=seats,
        queues=queues,
        hand_size=hand_size,
        queue_length_limit=queue_length_limit,
    )


def plan_levels(
    levels: Sequence[PriorityLevel], server_concurrency_limit: int
) -> ConfigurationPlan:
    """Compute the limits of ``levels`` sharing ``server_concurrency_limit`` seats.

    Args:
        levels: Every level that takes part: the configured ones (mandatory included) and any
            quiescing ones, since they all count in the share sum.
        server_concurrency_limit: ServerCL, at least 1.

    Returns:
        The plan, with the levels in the given order.

    Raises:
        ValueError: If ServerCL is not positive, two levels share a name, or a limited level
            lacks its ``limited`` (or ``queuing``) part.
    """
    if server_concurrency_limit < 1:
        raise ValueError(
            f"server concurrency limit must be positive, got {server_concurrency_limit}"
        )
    names = [level.name for level in levels]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"priority level names must be unique: {', '.join(duplicates)}")
    share_sum = sum(level.nominal_concurrency_shares for level in levels)
    plans = tuple(_plan_level(level, server_concurrency_limit, share_sum) for level in levels)
    return ConfigurationPlan(
        server_concurrency_limit=server_concurrency_limit,
        share_sum=share_sum,
        nominal_limit_sum=sum(plan.nominal_limit for plan in plans),
        levels=plans,
    )


def plan_configuration(
    config: Configuration, server_concurrency_limit: int | None = None
) -> ConfigurationPlan:
    """Compute the limits of a configuration's priority levels.

    Args:
        config: The configuration.
        server_concurrency_limit: ServerCL to plan for; ``None`` uses the configuration's own.

    Returns:
        The plan, with the levels in the configuration's order.
    """
    if server_concurrency_limit is None:
        server_concurrency_limit = config.server_concurrency_limit
    return plan_levels(config.priority_levels, server_concurrency_limit)
