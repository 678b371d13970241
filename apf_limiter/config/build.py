"""Turning validated drafts into the frozen model objects.

Only drafts that passed validation are built, so the string fields hold supported values.
Normalisations: an ``Exempt`` level always carries its ``exempt`` part (absent -> zeros); a
``Reject`` response has no queuing; a ``ByHeader`` header name is stored lower-case; the parts of
a subject that do not belong to its kind are dropped (validation forbids them anyway).
"""

from __future__ import annotations

from typing import cast

from apf_limiter.config.draft import (
    FlowSchemaDraft,
    LimitedDraft,
    PriorityLevelDraft,
    RuleDraft,
    SubjectDraft,
)
from apf_limiter.config.model import (
    DistinguisherType,
    ExemptPriorityLevelConfiguration,
    FlowDistinguisherMethod,
    FlowSchema,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    LimitResponseType,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    PriorityLevel,
    QueuingConfiguration,
    ResourcePolicyRule,
    Subject,
    SubjectKind,
)

__all__ = ["build_priority_level", "build_flow_schema"]


def build_priority_level(draft: PriorityLevelDraft) -> PriorityLevel:
    """Build the model of a validated priority level draft."""
    if draft.type == "Exempt":
        exempt = draft.exempt
        return PriorityLevel(
            name=draft.name,
            type="Exempt",
            exempt=ExemptPriorityLevelConfiguration(
                nominal_concurrency_shares=(exempt.nominal_concurrency_shares or 0)
                if exempt
                else 0,
                lendable_percent=(exempt.lendable_percent or 0) if exempt else 0,
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


def build_flow_schema(draft: FlowSchemaDraft) -> FlowSchema:
    """Build the model of a validated flow schema draft."""
    method = None
    if draft.distinguisher is not None:
        method_type = draft.distinguisher.type
        header = (draft.distinguisher.header or "").lower() if method_type == "ByHeader" else ""
        method = FlowDistinguisherMethod(type=cast(DistinguisherType, method_type), header=header)
    return FlowSchema(
        name=draft.name,
        priority_level=draft.priority_level,
        matching_precedence=draft.matching_precedence,
        distinguisher_method=method,
        rules=tuple(_build_rule(rule) for rule in draft.rules),
    )


def _build_rule(rule: RuleDraft) -> PolicyRulesWithSubjects:
    return PolicyRulesWithSubjects(
        subjects=tuple(_build_subject(subject) for subject in rule.subjects),
        resource_rules=tuple(
            ResourcePolicyRule(
                verbs=tuple(r.verbs),
                api_groups=tuple(r.api_groups),
                resources=tuple(r.resources),
                cluster_scope=r.cluster_scope,
                namespaces=tuple(r.namespaces),
            )
            for r in rule.resource_rules
        ),
        non_resource_rules=tuple(
            NonResourcePolicyRule(
                verbs=tuple(r.verbs), non_resource_urls=tuple(r.non_resource_urls)
            )
            for r in rule.non_resource_rules
        ),
    )


def _build_subject(subject: SubjectDraft) -> Subject:
    kind = cast(SubjectKind, subject.kind)
    if subject.kind == "ServiceAccount" and subject.service_account is not None:
        account = subject.service_account
        return Subject(kind=kind, name=account.name, namespace=account.namespace)
    if subject.kind == "User":
        return Subject(kind=kind, name=subject.user or "")
    return Subject(kind=kind, name=subject.group or "")
