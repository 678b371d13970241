"""Validation of priority levels, mirroring Kubernetes' rules and messages exactly.

The checks and their order are those of Kubernetes' ``ValidatePriorityLevelConfiguration``:
object name, the v1beta3 round-trip annotation, the spec (type/union rules, limited and exempt
parts, limit response, queuing with the shuffle-sharding entropy rule), the mandatory objects'
fixed specs, then status conditions. :func:`validate_name` and :func:`validate_conditions` are
shared with flow schemas.
"""

from __future__ import annotations

import math
from functools import cache

from apf_limiter.config.defaults import CATCH_ALL, EXEMPT, MANDATORY_PRIORITY_LEVELS
from apf_limiter.config.draft import (
    ExemptDraft,
    LimitedDraft,
    LimitResponseDraft,
    PriorityLevelDraft,
    QueuingDraft,
)
from apf_limiter.config.dump import dump_priority_level
from apf_limiter.config.header import PRESERVE_ZERO_SHARES_ANNOTATION
from apf_limiter.config.names import dns1123_subdomain_errors
from apf_limiter.config.parse_levels import parse_priority_level
from apf_limiter.config.problems import Problems, index, join

__all__ = [
    "MAX_HASH_BITS",
    "MAX_QUEUES",
    "required_entropy_bits",
    "validate_name",
    "validate_conditions",
    "validate_priority_level",
]

MAX_HASH_BITS = 60
MAX_QUEUES = 10_000_000
_LEVEL_TYPES = ("Exempt", "Limited")
_LIMIT_RESPONSE_TYPES = ("Queue", "Reject")


def required_entropy_bits(deck_size: int, hand_size: int) -> int:
    """Bits of hash that dealing ``hand_size`` cards from ``deck_size`` consumes.

    ``ceil(log2(deck_size) * hand_size)`` in float64, as Kubernetes' shuffle sharding computes it.
    """
    return math.ceil(math.log2(deck_size) * hand_size)


def validate_name(name: str, path: str, problems: Problems) -> None:
    """Check an object name: required, and a DNS-1123 subdomain."""
    if not name:
        problems.required(path, "name or generateName is required")
        return
    for message in dns1123_subdomain_errors(name):
        problems.invalid(path, name, message)


def validate_conditions(condition_types: list[str], status_path: str, problems: Problems) -> None:
    """Check ``status.conditions``: each type non-empty and unique."""
    seen: set[str] = set()
    for i, condition_type in enumerate(condition_types):
        type_path = join(index(join(status_path, "conditions"), i), "type")
        if condition_type in seen:
            problems.duplicate(type_path, condition_type)
        seen.add(condition_type)
        if not condition_type:
            problems.required(type_path, "must not be empty")


def validate_priority_level(draft: PriorityLevelDraft, problems: Problems) -> None:
    """Check one priority level draft, recording every problem found."""
    validate_name(draft.name, draft.paths.name, problems)
    if draft.forbidden_annotation:
        problems.forbidden(
            draft.paths.annotations, f"annotation '{PRESERVE_ZERO_SHARES_ANNOTATION}' is forbidden"
        )
    _validate_spec(draft, problems)
    _validate_mandatory(draft, problems)
    validate_conditions(draft.condition_types, draft.paths.status, problems)


def _validate_spec(draft: PriorityLevelDraft, problems: Problems) -> None:
    spec = draft.paths.spec
    type_path = join(spec, "type")
    if (draft.name == EXEMPT) != (draft.type == "Exempt"):
        problems.invalid(
            type_path, draft.type, "type must be 'Exempt' if and only if name is 'exempt'"
        )
    if draft.type == "Exempt":
        if draft.limited is not None:
            problems.forbidden(join(spec, "limited"), "must be nil if the type is not Limited")
        if draft.exempt is not None:
            _validate_exempt(draft.exempt, join(spec, "exempt"), problems)
    elif draft.type == "Limited":
        if draft.exempt is not None:
            problems.forbidden(join(spec, "exempt"), "must be nil if the type is Limited")
        if draft.limited is None:
            problems.required(join(spec, "limited"), "must not be empty when type is Limited")
        else:
            _validate_limited(draft.limited, join(spec, "limited"), problems)
    else:
        problems.not_supported(type_path, draft.type, _LEVEL_TYPES)


def _validate_exempt(exempt: ExemptDraft, path: str, problems: Problems) -> None:
    shares = exempt.nominal_concurrency_shares
    if shares is not None and shares < 0:
        problems.invalid(
            join(path, "nominalConcurrencyShares"), shares, "must be a non-negative integer"
        )
    _validate_lendable(exempt.lendable_percent, path, problems)


def _validate_lendable(lendable: int | None, path: str, problems: Problems) -> None:
    if lendable is not None and not 0 <= lendable <= 100:
        problems.invalid(
            join(path, "lendablePercent"), lendable, "must be between 0 and 100, inclusive"
        )


def _validate_limited(limited: LimitedDraft, path: str, problems: Problems) -> None:
    shares = limited.nominal_concurrency_shares
    shares_path = join(path, limited.shares_field)
    if limited.shares_field == "assuredConcurrencyShares":
        if shares <= 0:
            problems.invalid(shares_path, shares, "must be positive")
    elif shares < 0:
        problems.invalid(shares_path, shares, "must be a non-negative integer")
    _validate_limit_response(limited.limit_response, join(path, "limitResponse"), problems)
    _validate_lendable(limited.lendable_percent, path, problems)
    borrowing = limited.borrowing_limit_percent
    if borrowing is not None and borrowing < 0:
        problems.invalid(
            join(path, "borrowingLimitPercent"),
            borrowing,
            "if specified, must be a non-negative integer",
        )


def _validate_limit_response(response: LimitResponseDraft, path: str, problems: Problems) -> None:
    queuing_path = join(path, "queuing")
    # The "is Limited" wording of these two messages is Kubernetes' own (sic).
    if response.type == "Reject":
        if response.queuing is not None:
            problems.forbidden(
                queuing_path, "must be nil if limited.limitResponse.type is not Limited"
            )
    elif response.type == "Queue":
        if response.queuing is None:
            problems.required(
                queuing_path, "must not be empty if limited.limitResponse.type is Limited"
            )
        else:
            _validate_queuing(response.queuing, queuing_path, problems)
    else:
        problems.not_supported(join(path, "type"), response.type, _LIMIT_RESPONSE_TYPES)


def _validate_queuing(queuing: QueuingDraft, path: str, problems: Problems) -> None:
    length_limit = queuing.queue_length_limit
    if length_limit <= 0:
        problems.invalid(join(path, "queueLengthLimit"), length_limit, "must be positive")
    queues = queuing.queues
    queues_path = join(path, "queues")
    if queues <= 0:
        problems.invalid(queues_path, queues, "must be positive")
    elif queues > MAX_QUEUES:
        problems.invalid(queues_path, queues, f"must not be greater than {MAX_QUEUES}")
    hand = queuing.hand_size
    hand_path = join(path, "handSize")
    if hand <= 0:
        problems.invalid(hand_path, hand, "must be positive")
    elif hand > queues:
        problems.invalid(hand_path, hand, f"should not be greater than queues ({queues})")
    elif required_entropy_bits(queues, hand) > MAX_HASH_BITS:
        problems.invalid(
            hand_path,
            hand,
            f"required entropy bits of deckSize {queues} and handSize {hand} "
            f"should not be greater than {MAX_HASH_BITS}",
        )


@cache
def _fixed_drafts() -> dict[str, PriorityLevelDraft]:
    # The fixed specs as drafts, so that "equal" means what Kubernetes' semantic equality of
    # the defaulted specs means, including parts the model would drop (e.g. a stray `limited`).
    return {
        level.name: parse_priority_level(dump_priority_level(level), i, Problems())
        for i, level in enumerate(MANDATORY_PRIORITY_LEVELS)
    }


def _validate_mandatory(draft: PriorityLevelDraft, problems: Problems) -> None:
    fixed = _fixed_drafts().get(draft.name)
    if fixed is None or not draft.clean:
        return
    if draft.name == EXEMPT:
        if (draft.type, draft.limited) != (fixed.type, fixed.limited):
            problems.invalid_omitted(
                draft.paths.spec,
                f"spec of '{EXEMPT}' except the 'spec.exempt' field must equal the fixed value",
            )
        return
    assert draft.name == CATCH_ALL
    if (draft.type, draft.limited, draft.exempt) != (fixed.type, fixed.limited, fixed.exempt):
        problems.invalid_omitted(
            draft.paths.spec, f"spec of '{CATCH_ALL}' must equal the fixed value"
        )
