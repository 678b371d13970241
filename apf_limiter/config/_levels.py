"""Priority levels: each entry is parsed into a draft, the draft checked, then built.

A draft holds what the user wrote after version conversion and defaulting (Kubernetes', see "API
versions" in docs/configuration.md), with Go's zero values for what is missing, so that the checks
apply Kubernetes' rules literally. The short form may omit ``type`` (``Exempt`` for the level
named ``exempt``, else ``Limited``), ``limited`` (all defaults), ``limitResponse`` (queue with the
default queuing) and a ``Queue`` response's ``queuing``. Building normalises: an ``Exempt`` level
always carries its ``exempt`` part (absent -> zeros), and a ``Reject`` response has no queuing.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cache
from typing import cast

from apf_limiter.config._defaults import MANDATORY_PRIORITY_LEVELS
from apf_limiter.config._envelope import (
    EntryDraft,
    read_envelope,
    validate_conditions,
    validate_name,
)
from apf_limiter.config._fields import Reader
from apf_limiter.config._model import (
    LIMIT_RESPONSE_TYPES,
    PRIORITY_LEVEL_TYPES,
    ExemptPriorityLevelConfiguration,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    LimitResponseType,
    PriorityLevel,
    QueuingConfiguration,
)
from apf_limiter.config._names import CATCH_ALL, EXEMPT
from apf_limiter.config._problems import Problems, RawMapping, join
from apf_limiter.config._serialize import serialize_priority_level
from apf_limiter.engine._shuffle_sharding import MAX_HASH_BITS, required_entropy_bits

LEVEL_SPEC_KEYS: tuple[str, ...] = ("type", "limited", "exempt")
PRESERVE_ZERO_SHARES_ANNOTATION = "flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares"
DEFAULT_SHARES = 30
DEFAULT_QUEUES = 64
DEFAULT_HAND_SIZE = 8
DEFAULT_QUEUE_LENGTH_LIMIT = 50
MAX_QUEUES = 10_000_000

_OLD_SHARES_VERSIONS = ("v1beta1", "v1beta2")
_QUEUING_KEYS = ("queues", "handSize", "queueLengthLimit")


@dataclass(slots=True)
class QueuingDraft:
    """Draft of ``limitResponse.queuing``."""

    queues: int = 0
    hand_size: int = 0
    queue_length_limit: int = 0


@dataclass(slots=True)
class LimitResponseDraft:
    """Draft of ``limited.limitResponse``."""

    type: str = ""
    queuing: QueuingDraft | None = None


@dataclass(slots=True)
class LimitedDraft:
    """Draft of ``spec.limited``; ``shares_field`` is the version's name of the shares field."""

    nominal_concurrency_shares: int = 0
    lendable_percent: int | None = None
    borrowing_limit_percent: int | None = None
    limit_response: LimitResponseDraft = field(default_factory=LimitResponseDraft)
    shares_field: str = field(default="nominalConcurrencyShares", compare=False)


@dataclass(slots=True)
class ExemptDraft:
    """Draft of ``spec.exempt``."""

    nominal_concurrency_shares: int | None = None
    lendable_percent: int | None = None


@dataclass(slots=True)
class PriorityLevelDraft(EntryDraft):
    """Draft of a priority level (its envelope's part is an :class:`EntryDraft`).

    Attributes:
        type: ``spec.type``.
        limited: ``spec.limited``.
        exempt: ``spec.exempt``.
        forbidden_annotation: Whether it carries the v1beta3 round-trip annotation although it
            is not a v1beta3 object.
    """

    type: str = ""
    limited: LimitedDraft | None = None
    exempt: ExemptDraft | None = None
    forbidden_annotation: bool = False


def parse_priority_level(
    raw: RawMapping, position: int, problems: Problems, taken: AbstractSet[str] = frozenset()
) -> PriorityLevelDraft:
    """Parse one ``priorityLevels`` entry (full object or short form).

    Args:
        raw: The entry as written.
        position: Its position among all priority levels (used in paths when it has no name).
        problems: Where problems are recorded.
        taken: Names of the earlier entries (a repeated name is not used in paths).
    """
    before = len(problems)
    envelope = read_envelope(
        raw,
        collection="priorityLevels",
        kind="PriorityLevelConfiguration",
        position=position,
        spec_keys=LEVEL_SPEC_KEYS,
        problems=problems,
        taken=taken,
    )
    short = envelope.version == "short"
    spec = envelope.spec
    draft = PriorityLevelDraft(name=envelope.name, paths=envelope.paths, version=envelope.version)
    draft.condition_types = envelope.conditions
    draft.forbidden_annotation = (
        not short
        and envelope.version != "v1beta3"
        and PRESERVE_ZERO_SHARES_ANNOTATION in envelope.annotations
    )

    level_type = spec.string("type")
    if level_type is None and short and not spec.has("type"):
        level_type = "Exempt" if envelope.name == EXEMPT else "Limited"
    draft.type = level_type or ""

    shares_field = (
        "assuredConcurrencyShares"
        if envelope.version in _OLD_SHARES_VERSIONS
        else "nominalConcurrencyShares"
    )
    limited_keys = (shares_field, "lendablePercent", "borrowingLimitPercent", "limitResponse")
    limited = spec.mapping("limited", limited_keys)
    if limited is None and short and level_type == "Limited" and not spec.has("limited"):
        # Short form: a limited level may leave out `limited` altogether (all defaults).
        limited = Reader({}, spec.child_path("limited"), problems, limited_keys)
    if limited is not None:
        preserve_zero = PRESERVE_ZERO_SHARES_ANNOTATION in envelope.annotations
        draft.limited = _parse_limited(limited, envelope.version, shares_field, preserve_zero)

    exempt = spec.mapping("exempt", ("nominalConcurrencyShares", "lendablePercent"))
    if exempt is not None:
        draft.exempt = ExemptDraft(
            nominal_concurrency_shares=exempt.integer("nominalConcurrencyShares") or 0,
            lendable_percent=exempt.integer("lendablePercent") or 0,
        )
    draft.clean = len(problems) == before
    return draft


def _shares(written: int | None, version: str, preserve_zero: bool) -> int:
    if version in ("short", "v1"):
        return DEFAULT_SHARES if written is None else written
    if version == "v1beta3":
        if not written and not preserve_zero:
            return DEFAULT_SHARES
        return written or 0
    return written or DEFAULT_SHARES


def _parse_limited(
    limited: Reader, version: str, shares_field: str, preserve_zero: bool
) -> LimitedDraft:
    short = version == "short"
    draft = LimitedDraft(
        nominal_concurrency_shares=_shares(limited.integer(shares_field), version, preserve_zero),
        lendable_percent=limited.integer("lendablePercent") or 0,
        borrowing_limit_percent=limited.integer("borrowingLimitPercent"),
        shares_field=shares_field,
    )
    response = limited.mapping("limitResponse", ("type", "queuing"))
    if response is None:
        if short and not limited.has("limitResponse"):
            draft.limit_response = LimitResponseDraft("Queue", _default_queuing())
        return draft
    draft.limit_response.type = response.string("type") or ""
    queuing = response.mapping("queuing", _QUEUING_KEYS)
    if queuing is not None:
        draft.limit_response.queuing = QueuingDraft(
            queues=queuing.integer("queues") or DEFAULT_QUEUES,
            hand_size=queuing.integer("handSize") or DEFAULT_HAND_SIZE,
            queue_length_limit=queuing.integer("queueLengthLimit") or DEFAULT_QUEUE_LENGTH_LIMIT,
        )
    elif short and draft.limit_response.type == "Queue" and not response.has("queuing"):
        draft.limit_response.queuing = _default_queuing()
    return draft


def _default_queuing() -> QueuingDraft:
    return QueuingDraft(DEFAULT_QUEUES, DEFAULT_HAND_SIZE, DEFAULT_QUEUE_LENGTH_LIMIT)


def validate_priority_level(draft: PriorityLevelDraft, problems: Problems) -> None:
    """Check one priority level draft, recording every problem found.

    The checks and their order are those of Kubernetes' ``ValidatePriorityLevelConfiguration``:
    object name, the v1beta3 round-trip annotation, the spec (type/union rules, limited and
    exempt parts, limit response, queuing with the shuffle-sharding entropy rule), the mandatory
    objects' fixed specs, then status conditions.
    """
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
        problems.not_supported(type_path, draft.type, PRIORITY_LEVEL_TYPES)


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
        problems.not_supported(join(path, "type"), response.type, LIMIT_RESPONSE_TYPES)


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
        level.name: parse_priority_level(serialize_priority_level(level), i, Problems())
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


def build_priority_level(draft: PriorityLevelDraft) -> PriorityLevel:
    """Build the model of a validated priority level draft."""
    if draft.type == "Exempt":
        exempt = draft.exempt or ExemptDraft()
        return PriorityLevel(
            name=draft.name,
            type="Exempt",
            exempt=ExemptPriorityLevelConfiguration(
                nominal_concurrency_shares=exempt.nominal_concurrency_shares or 0,
                lendable_percent=exempt.lendable_percent or 0,
            ),
        )
    assert draft.limited is not None, "validation guarantees a limited part"
    return PriorityLevel(name=draft.name, type="Limited", limited=_build_limited(draft.limited))


def _build_limited(limited: LimitedDraft) -> LimitedPriorityLevelConfiguration:
    response = limited.limit_response
    queuing = response.queuing
    return LimitedPriorityLevelConfiguration(
        nominal_concurrency_shares=limited.nominal_concurrency_shares,
        lendable_percent=limited.lendable_percent or 0,
        borrowing_limit_percent=limited.borrowing_limit_percent,
        limit_response=LimitResponse(
            type=cast(LimitResponseType, response.type),
            queuing=(
                QueuingConfiguration(
                    queues=queuing.queues,
                    hand_size=queuing.hand_size,
                    queue_length_limit=queuing.queue_length_limit,
                )
                if queuing is not None and response.type == "Queue"
                else None
            ),
        ),
    )
