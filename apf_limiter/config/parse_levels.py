"""Parsing one priority level entry into a :class:`PriorityLevelDraft`.

Version conversion and defaulting follow Kubernetes:

* v1: ``nominalConcurrencyShares`` nil -> 30, an explicit 0 is kept.
* v1beta3: ``nominalConcurrencyShares`` 0 (or absent) -> 30, unless the annotation
  ``flowcontrol.k8s.io/v1beta3-preserve-zero-concurrency-shares`` is present.
* v1beta2/v1beta1: the field is ``assuredConcurrencyShares``; 0 (or absent) -> 30.
* every version: ``lendablePercent`` nil -> 0; each queuing field 0 -> its default
  (queues 64, handSize 8, queueLengthLimit 50); ``exempt`` fields nil -> 0.

The short form adds conveniences: ``type`` may be omitted (``Exempt`` for the level named
``exempt``, else ``Limited``); a limited level may omit ``limited`` (all its defaults) or
``limitResponse`` (then it queues with the
default queuing) and a ``Queue`` response may omit ``queuing``.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from apf_limiter.config.draft import (
    ExemptDraft,
    LimitedDraft,
    LimitResponseDraft,
    PriorityLevelDraft,
    QueuingDraft,
)
from apf_limiter.config.header import PRESERVE_ZERO_SHARES_ANNOTATION, read_header
from apf_limiter.config.problems import Problems, RawMapping
from apf_limiter.config.reader import Reader

__all__ = [
    "LEVEL_SPEC_KEYS",
    "DEFAULT_SHARES",
    "DEFAULT_QUEUES",
    "DEFAULT_HAND_SIZE",
    "DEFAULT_QUEUE_LENGTH_LIMIT",
    "parse_priority_level",
]

LEVEL_SPEC_KEYS: tuple[str, ...] = ("type", "limited", "exempt")
DEFAULT_SHARES = 30
DEFAULT_QUEUES = 64
DEFAULT_HAND_SIZE = 8
DEFAULT_QUEUE_LENGTH_LIMIT = 50

_OLD_SHARES_VERSIONS = ("v1beta1", "v1beta2")
_QUEUING_KEYS = ("queues", "handSize", "queueLengthLimit")


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
    header = read_header(
        raw,
        collection="priorityLevels",
        kind="PriorityLevelConfiguration",
        position=position,
        spec_keys=LEVEL_SPEC_KEYS,
        problems=problems,
        taken=taken,
    )
    short = header.version == "short"
    spec = header.spec
    draft = PriorityLevelDraft(name=header.name, paths=header.paths, version=header.version)
    draft.condition_types = header.conditions
    draft.forbidden_annotation = (
        not short
        and header.version != "v1beta3"
        and PRESERVE_ZERO_SHARES_ANNOTATION in header.annotations
    )

    level_type = spec.string("type")
    if level_type is None and short and not spec.has("type"):
        level_type = "Exempt" if header.name == "exempt" else "Limited"
    draft.type = level_type or ""

    shares_field = (
        "assuredConcurrencyShares"
        if header.version in _OLD_SHARES_VERSIONS
        else "nominalConcurrencyShares"
    )
    limited_keys = (shares_field, "lendablePercent", "borrowingLimitPercent", "limitResponse")
    limited = spec.mapping("limited", limited_keys)
    if limited is None and short and level_type == "Limited" and not spec.has("limited"):
        # Short form: a limited level may leave out `limited` altogether (all defaults).
        limited = Reader({}, spec.child_path("limited"), problems, limited_keys)
    if limited is not None:
        preserve_zero = PRESERVE_ZERO_SHARES_ANNOTATION in header.annotations
        draft.limited = _parse_limited(limited, header.version, shares_field, preserve_zero)

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
