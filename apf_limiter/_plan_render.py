"""Plain-text rendering of a configuration and its concurrency plan (``apf-limiter show``).

The output is meant for people: aligned columns, numbers right-aligned, ``-`` where a value does
not apply (exempt and ``Reject`` levels have no queues and no maxSeats), and one line per flow
schema with a short summary of its rules, for example
``groups system:authenticated; GET,HEAD /healthz,/readyz``.
"""

from __future__ import annotations

from collections.abc import Sequence

from apf_limiter.config._changes import (
    describe_adaptive,
    describe_enforcement,
    describe_rejection_status,
)
from apf_limiter.config._model import (
    Configuration,
    FlowSchema,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    ResourcePolicyRule,
    Subject,
)
from apf_limiter.engine._classifier import order_flow_schemas
from apf_limiter.engine._concurrency import ConfigurationPlan, LevelPlan

_NOT_APPLICABLE = "-"
_SUBJECT_LABELS = {"Group": "groups", "User": "users", "ServiceAccount": "service accounts"}

_LEVEL_HEADERS = (
    "NAME",
    "TYPE",
    "SHARES",
    "NOMINAL",
    "LENDABLE",
    "LOWER",
    "UPPER",
    "MAX SEATS",
    "QUEUES/HAND/LENGTH",
    "ENFORCEMENT",
)
_LEVEL_RIGHT = (False, False, True, True, True, True, True, True, True, False)
_SCHEMA_HEADERS = ("PRECEDENCE", "NAME", "PRIORITY LEVEL", "DISTINGUISHER", "RULES")
_SCHEMA_RIGHT = (True, False, False, False, False)


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right_aligned: Sequence[bool]
) -> list[str]:
    """Lay out ``rows`` under ``headers`` in columns two spaces apart.

    Args:
        headers: Column titles.
        rows: Cells, one sequence per row, as many as there are headers.
        right_aligned: Per column, whether to right-align (numbers) or left-align (text).

    Returns:
        The header line followed by one line per row, without trailing spaces.
    """
    widths = [len(header) for header in headers]
    for row in rows:
        for column, cell in enumerate(row):
            widths[column] = max(widths[column], len(cell))
    lines = []
    for row in (headers, *rows):
        cells = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, right_aligned, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def describe_level_type(plan: LevelPlan) -> str:
    """Return ``Exempt``, ``Limited-Queue`` or ``Limited-Reject``."""
    if plan.is_exempt:
        return "Exempt"
    return f"Limited-{plan.limit_response}"


def describe_distinguisher(schema: FlowSchema) -> str:
    """Return the schema's distinguisher method, e.g. ``ByUser`` or ``ByHeader(x-tenant-id)``."""
    method = schema.distinguisher_method
    if method is None:
        return _NOT_APPLICABLE
    if method.type == "ByHeader":
        return f"ByHeader({method.header})"
    return method.type


def _describe_subjects(subjects: Sequence[Subject]) -> str:
    names: dict[str, list[str]] = {}
    for subject in subjects:
        if subject.kind == "ServiceAccount":
            name = f"{subject.namespace}/{subject.name}"
        else:
            name = subject.name
        names.setdefault(subject.kind, []).append(name)
    return " + ".join(
        f"{_SUBJECT_LABELS.get(kind, kind)} {','.join(values)}" for kind, values in names.items()
    )


def _describe_resource_rule(rule: ResourcePolicyRule) -> str:
    wildcard = ("*",)
    if (
        rule.verbs == wildcard
        and rule.api_groups == wildcard
        and rule.resources == wildcard
        and rule.namespaces == wildcard
        and rule.cluster_scope
    ):
        return "all resources"
    groups = ",".join(group or '""' for group in rule.api_groups)
    scope = []
    if rule.namespaces:
        scope.append(f"ns {','.join(rule.namespaces)}")
    if rule.cluster_scope:
        scope.append("cluster-scoped")
    return (
        f"{','.join(rule.verbs)} {','.join(rule.resources)} group {groups}"
        f" ({' + '.join(scope) or 'no scope'})"
    )


def _describe_non_resource_rule(rule: NonResourcePolicyRule) -> str:
    if rule.verbs == ("*",) and rule.non_resource_urls == ("*",):
        return "all paths"
    # Non-resource verbs are lower-case HTTP methods; people read them as methods.
    return f"{','.join(verb.upper() for verb in rule.verbs)} {','.join(rule.non_resource_urls)}"


def _describe_rule(rule: PolicyRulesWithSubjects) -> str:
    parts = [_describe_subjects(rule.subjects)]
    parts.extend(_describe_resource_rule(r) for r in rule.resource_rules)
    parts.extend(_describe_non_resource_rule(r) for r in rule.non_resource_rules)
    return "; ".join(parts)


def describe_rules(schema: FlowSchema) -> str:
    """Summarise a schema's rules on one line; rules are separated by `` | ``.

    Each rule reads as its subjects, then its resource and non-resource rules, separated by
    ``; ``, e.g. ``groups system:authenticated; GET,HEAD /healthz,/readyz``. A schema without
    rules matches nothing and reads ``(no rules)``.
    """
    if not schema.rules:
        return "(no rules)"
    return " | ".join(_describe_rule(rule) for rule in schema.rules)


def _level_row(plan: LevelPlan, enforcement: str) -> list[str]:
    if plan.is_queuing:
        seats = str(plan.max_seats)
        queuing = f"{plan.queues}/{plan.hand_size}/{plan.queue_length_limit}"
    else:
        seats = queuing = _NOT_APPLICABLE
    return [
        plan.name,
        describe_level_type(plan),
        str(plan.nominal_concurrency_shares),
        str(plan.nominal_limit),
        str(plan.lendable_limit),
        str(plan.lower_limit),
        str(plan.upper_limit),
        seats,
        queuing,
        enforcement,
    ]


def _schema_row(schema: FlowSchema) -> list[str]:
    return [
        str(schema.matching_precedence),
        schema.name,
        schema.priority_level,
        describe_distinguisher(schema),
        describe_rules(schema),
    ]


def _number(value: float) -> str:
    return f"{value:g}"


def render_plan(
    config: Configuration, plan: ConfigurationPlan, *, source: str, workers: int | None = None
) -> str:
    """Render a configuration and its plan as text.

    Args:
        config: The configuration (its flow schemas and timing settings are shown).
        plan: The plan of its priority levels (possibly for another server limit).
        source: Where the configuration came from, shown in the header.
        workers: The worker processes (or replicas) that each run this plan, if given: a
            header line states the seats per process and in total.

    Returns:
        The text, ending with a newline: a header (server limit, share sum, nominal limit
        sum, wait limit, borrowing period), the priority-level table in configuration order,
        then the flow-schema table in matching order.
    """
    lines = [
        f"Configuration: {source}",
        f"Server concurrency limit: {plan.server_concurrency_limit}"
        f"   share sum: {plan.share_sum}"
        f"   nominal limit sum: {plan.nominal_limit_sum}",
        f"Most requests running at once: {plan.max_executing_requests} (plus exempt ones;"
        " the server limit is a target, not a cap)",
        *_workers_line(plan, workers),
        f"Request wait limit: {_number(config.request_wait_limit)}s"
        f"   borrowing period: {_number(config.borrowing_period)}s",
        f"Enforcement: {describe_enforcement(config)}",
        f"Rejection status: {describe_rejection_status(config)}",
        f"Adaptive concurrency: {describe_adaptive(config.adaptive_concurrency)}"
        + (
            " (learning starts from the server limit)"
            if config.adaptive_concurrency is not None
            and config.adaptive_concurrency.initial_limit is None
            else ""
        ),
        "",
        f"Priority levels ({len(plan.levels)}):",
    ]
    level_rows = [_level_row(level, config.enforcement_of(level.name)) for level in plan.levels]
    lines.extend(format_table(_LEVEL_HEADERS, level_rows, _LEVEL_RIGHT))
    schemas = order_flow_schemas(config.flow_schemas, config.imagined_flow_schemas)
    lines += ["", f"Flow schemas ({len(schemas)}, in matching order):"]
    schema_rows = [_schema_row(schema) for schema in schemas]
    lines.extend(format_table(_SCHEMA_HEADERS, schema_rows, _SCHEMA_RIGHT))
    notes = plan_notes(plan)
    if notes:
        lines += ["", "Notes:"]
        lines.extend(f"  - {note}" for note in notes)
    return "\n".join(lines) + "\n"


def _workers_line(plan: ConfigurationPlan, workers: int | None) -> list[str]:
    """The seats of ``workers`` processes that each run the plan (none without ``workers``)."""
    if workers is None:
        return []
    limit, most = plan.server_concurrency_limit, plan.max_executing_requests
    return [
        f"Workers: {workers}, each with its own limiter: {limit} seats per process, "
        f"{limit * workers} in total (at most {most * workers} requests running at once, plus "
        "exempt ones); fairness holds within each process"
    ]


def plan_notes(plan: ConfigurationPlan) -> list[str]:
    """Warnings about a plan: levels that may admit nothing at this server limit.

    Args:
        plan: The plan to check.

    Returns:
        One sentence per finding (empty when there is nothing to say).
    """
    notes = []
    for level in plan.levels:
        if level.type == "Exempt" or level.lower_limit > 0:
            continue
        if level.nominal_limit == 0:
            notes.append(
                f"{level.name}: no nominal seats (0 shares); it admits only what borrowing "
                "gives it"
                + (
                    " (its borrowing limit is 0: it admits nothing)"
                    if level.upper_limit == 0
                    else ""
                )
            )
        elif level.limit_response == "Reject":
            notes.append(
                f"{level.name}: lower limit 0 on a Reject level; once borrowing lends all its "
                "seats away it rejects everything (lower lendablePercent)"
            )
        else:
            notes.append(
                f"{level.name}: lower limit 0; it starts with no seats and gets them from "
                "borrowing when requests wait there (lower lendablePercent to keep some)"
            )
    return notes
