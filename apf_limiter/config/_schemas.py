"""Flow schemas: each entry is parsed into a draft, the draft checked, then built.

The flow schema is the same in every API version. Defaulting follows Kubernetes v1:
``matchingPrecedence`` 0 (or absent) -> 1000. The checks and their order are those of
Kubernetes' ``ValidateFlowSchema``: object name, the spec (matching precedence, distinguisher,
level reference, rules), the mandatory objects' fixed specs, then status conditions; the rules
themselves are in :mod:`apf_limiter.config._rules`. Deviation D2 (documented in
docs/configuration.md): distinguisher types ``ByClientIP`` and ``ByHeader`` (with its ``header``)
are supported; building stores a ``ByHeader`` header name lower-case. The ``jobs`` short form
and the ``ByTenant`` distinguisher (``ByNamespace`` by its jobs name) are read and expanded by
:mod:`apf_limiter.config._jobs`.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cache
from typing import cast

from apf_limiter.config._defaults import MANDATORY_FLOW_SCHEMAS
from apf_limiter.config._envelope import (
    EntryDraft,
    read_envelope,
    validate_conditions,
    validate_name,
)
from apf_limiter.config._jobs import BY_TENANT, JobsDraft, jobs_rule, parse_jobs, validate_jobs
from apf_limiter.config._model import (
    DISTINGUISHER_TYPES,
    DistinguisherType,
    FlowDistinguisherMethod,
    FlowSchema,
)
from apf_limiter.config._names import EXEMPT, dns1123_subdomain_errors, http_token_errors
from apf_limiter.config._problems import Problems, RawMapping, index, join
from apf_limiter.config._rules import RuleDraft, build_rule, parse_rules, validate_rule
from apf_limiter.config._serialize import serialize_flow_schema

SCHEMA_SPEC_KEYS: tuple[str, ...] = (
    "matchingPrecedence",
    "priorityLevelConfiguration",
    "distinguisherMethod",
    "rules",
    "jobs",
)
DEFAULT_MATCHING_PRECEDENCE = 1000
MAX_MATCHING_PRECEDENCE = 10000


@dataclass(slots=True)
class DistinguisherDraft:
    """Draft of ``spec.distinguisherMethod``; ``header`` is ``None`` when absent."""

    type: str = ""
    header: str | None = None


@dataclass(slots=True)
class FlowSchemaDraft(EntryDraft):
    """Draft of a flow schema (its envelope's part is an :class:`EntryDraft`).

    Attributes:
        matching_precedence: ``spec.matchingPrecedence`` (after defaulting).
        priority_level: ``spec.priorityLevelConfiguration.name``.
        distinguisher: ``spec.distinguisherMethod``.
        rules: ``spec.rules``.
        jobs: ``spec.jobs``, the short form of one more rule (``None`` when absent).
    """

    matching_precedence: int = 0
    priority_level: str = ""
    distinguisher: DistinguisherDraft | None = None
    rules: list[RuleDraft] = field(default_factory=list)
    jobs: JobsDraft | None = None


def parse_flow_schema(
    raw: RawMapping, position: int, problems: Problems, taken: AbstractSet[str] = frozenset()
) -> FlowSchemaDraft:
    """Parse one ``flowSchemas`` entry (full object or short form).

    Args:
        raw: The entry as written.
        position: Its position among all flow schemas (used in paths when it has no name).
        problems: Where problems are recorded.
        taken: Names of the earlier entries (a repeated name is not used in paths).
    """
    before = len(problems)
    envelope = read_envelope(
        raw,
        collection="flowSchemas",
        kind="FlowSchema",
        position=position,
        spec_keys=SCHEMA_SPEC_KEYS,
        problems=problems,
        taken=taken,
    )
    spec = envelope.spec
    draft = FlowSchemaDraft(name=envelope.name, paths=envelope.paths, version=envelope.version)
    draft.condition_types = envelope.conditions
    draft.matching_precedence = spec.integer("matchingPrecedence") or DEFAULT_MATCHING_PRECEDENCE
    reference = spec.mapping("priorityLevelConfiguration", ("name",))
    if reference is not None:
        draft.priority_level = reference.string("name") or ""
    method = spec.mapping("distinguisherMethod", ("type", "header"))
    if method is not None:
        # An empty header is no header (Go's zero value), also when compared with the fixed
        # spec of a mandatory schema.
        draft.distinguisher = DistinguisherDraft(
            type=method.string("type") or "", header=method.string("header") or None
        )
    draft.rules = parse_rules(spec)
    draft.jobs = parse_jobs(spec)
    draft.clean = len(problems) == before
    return draft


def validate_flow_schema(draft: FlowSchemaDraft, problems: Problems) -> None:
    """Check one flow schema draft, recording every problem found."""
    validate_name(draft.name, draft.paths.name, problems)
    spec = draft.paths.spec
    precedence = draft.matching_precedence
    precedence_path = join(spec, "matchingPrecedence")
    if precedence <= 0:
        problems.invalid(precedence_path, precedence, "must be a positive value")
    if precedence > MAX_MATCHING_PRECEDENCE:
        problems.invalid(
            precedence_path, precedence, f"must not be greater than {MAX_MATCHING_PRECEDENCE}"
        )
    if precedence == 1 and draft.name != EXEMPT:
        problems.invalid(
            precedence_path,
            precedence,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        )
    if draft.distinguisher is not None:
        _validate_distinguisher(draft.distinguisher, join(spec, "distinguisherMethod"), problems)
    level_path = join(spec, "priorityLevelConfiguration.name")
    if draft.priority_level:
        for message in dns1123_subdomain_errors(draft.priority_level):
            problems.invalid(level_path, draft.priority_level, message)
    else:
        problems.required(level_path, "must reference a priority level")
    for i, rule in enumerate(draft.rules):
        validate_rule(rule, index(join(spec, "rules"), i), problems)
    if draft.jobs is not None:
        validate_jobs(draft.jobs, join(spec, "jobs"), problems)
    _validate_mandatory(draft, problems)
    validate_conditions(draft.condition_types, draft.paths.status, problems)


def _validate_distinguisher(method: DistinguisherDraft, path: str, problems: Problems) -> None:
    if method.type not in DISTINGUISHER_TYPES and method.type != BY_TENANT:
        problems.not_supported(
            join(path, "type"), method.type, sorted((*DISTINGUISHER_TYPES, BY_TENANT))
        )
    header_path = join(path, "header")
    if method.type == "ByHeader":
        if not method.header:
            problems.required(header_path, "must be set when type is 'ByHeader'")
        else:
            for message in http_token_errors(method.header):
                problems.invalid(header_path, method.header, message)
    elif method.header:
        problems.forbidden(header_path, "must be empty unless type is 'ByHeader'")


@cache
def _fixed_drafts() -> dict[str, FlowSchemaDraft]:
    return {
        schema.name: parse_flow_schema(serialize_flow_schema(schema), i, Problems())
        for i, schema in enumerate(MANDATORY_FLOW_SCHEMAS)
    }


def _spec_of(draft: FlowSchemaDraft) -> tuple[object, ...]:
    return (
        draft.matching_precedence,
        draft.priority_level,
        draft.distinguisher,
        draft.rules,
        draft.jobs,
    )


def _validate_mandatory(draft: FlowSchemaDraft, problems: Problems) -> None:
    fixed = _fixed_drafts().get(draft.name)
    if fixed is not None and draft.clean and _spec_of(draft) != _spec_of(fixed):
        problems.invalid_omitted(
            draft.paths.spec, f"spec of '{draft.name}' must equal the fixed value"
        )


def build_flow_schema(draft: FlowSchemaDraft) -> FlowSchema:
    """Build the model of a validated flow schema draft."""
    method = None
    if draft.distinguisher is not None:
        method_type = draft.distinguisher.type
        if method_type == BY_TENANT:
            method_type = "ByNamespace"
        header = (draft.distinguisher.header or "").lower() if method_type == "ByHeader" else ""
        method = FlowDistinguisherMethod(type=cast(DistinguisherType, method_type), header=header)
    return FlowSchema(
        name=draft.name,
        priority_level=draft.priority_level,
        matching_precedence=draft.matching_precedence,
        distinguisher_method=method,
        rules=tuple(build_rule(rule) for rule in draft.rules)
        + (() if draft.jobs is None else (jobs_rule(draft.jobs),)),
    )
