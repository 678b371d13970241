"""The mode of a configuration in words, and what changed between two configurations.

Operators read these in ``apf-limiter show`` and ``validate``, and in the limiter's
"configuration applied" log line: a switch from Shadow to Enforce must leave a trace.
"""

from __future__ import annotations

from apf_limiter.config._model import AdaptiveConcurrency, Configuration


def describe_rejection_status(config: Configuration) -> str:
    """The rejection status in force, e.g. ``429`` or ``429 (503: batch, reports)``."""
    others: dict[int, list[str]] = {}
    for name, status in config.priority_level_rejection_status:
        if status != config.rejection_status:
            others.setdefault(status, []).append(name)
    if not others:
        return str(config.rejection_status)
    exceptions = "; ".join(f"{status}: {', '.join(names)}" for status, names in others.items())
    return f"{config.rejection_status} ({exceptions})"


def describe_enforcement(config: Configuration) -> str:
    """The enforcement in force, e.g. ``Shadow`` or ``Enforce (Shadow: batch, reports)``.

    Levels whose enforcement differs from the configuration's are named after it.
    """
    others: dict[str, list[str]] = {}
    for name, enforcement in config.priority_level_enforcement:
        if enforcement != config.enforcement:
            others.setdefault(enforcement, []).append(name)
    if not others:
        return config.enforcement
    exceptions = "; ".join(f"{mode}: {', '.join(names)}" for mode, names in sorted(others.items()))
    return f"{config.enforcement} ({exceptions})"


def describe_adaptive(adaptive: AdaptiveConcurrency | None) -> str:
    """``off``, or the algorithm and bounds of the adaptive server limit."""
    if adaptive is None:
        return "off"
    start = "" if adaptive.initial_limit is None else f", initial {adaptive.initial_limit}"
    return (
        f"{adaptive.algorithm} {adaptive.min_limit}..{adaptive.max_limit}{start}, "
        f"update every {adaptive.update_interval:g}s, tolerance {adaptive.tolerance:g}"
    )


def configuration_changes(old: Configuration, new: Configuration) -> list[str]:
    """What an operator must know changed from ``old`` to ``new``, one phrase per change.

    Covers the enforcement and the rejection status (server-wide and per level), the server
    limit, the adaptive limit, the wait limit and borrowing period, and the priority levels
    and flow schemas added, removed or changed.

    Returns:
        Phrases such as ``enforcement Shadow -> Enforce`` or ``priority level batch added``,
        in a fixed order; empty when nothing changed.
    """
    changes = []
    if old.enforcement != new.enforcement:
        changes.append(f"enforcement {old.enforcement} -> {new.enforcement}")
    levels = sorted({level.name for level in (*old.priority_levels, *new.priority_levels)})
    for name in levels:
        was, now = old.enforcement_of(name), new.enforcement_of(name)
        if was != now and (was != old.enforcement or now != new.enforcement):
            changes.append(f"priority level {name} enforcement {was} -> {now}")
    if old.rejection_status != new.rejection_status:
        changes.append(f"rejection status {old.rejection_status} -> {new.rejection_status}")
    for name in levels:
        was_status, now_status = old.rejection_status_of(name), new.rejection_status_of(name)
        if was_status != now_status and (
            was_status != old.rejection_status or now_status != new.rejection_status
        ):
            changes.append(f"priority level {name} rejection status {was_status} -> {now_status}")
    if old.server_concurrency_limit != new.server_concurrency_limit:
        changes.append(
            f"server concurrency limit {old.server_concurrency_limit} -> "
            f"{new.server_concurrency_limit}"
        )
    if old.adaptive_concurrency != new.adaptive_concurrency:
        changes.append(
            f"adaptive concurrency {describe_adaptive(old.adaptive_concurrency)} -> "
            f"{describe_adaptive(new.adaptive_concurrency)}"
        )
    if old.request_wait_limit != new.request_wait_limit:
        changes.append(
            f"request wait limit {old.request_wait_limit:g}s -> {new.request_wait_limit:g}s"
        )
    if old.borrowing_period != new.borrowing_period:
        changes.append(f"borrowing period {old.borrowing_period:g}s -> {new.borrowing_period:g}s")
    changes += _named_changes(
        "priority level",
        {level.name: level for level in old.priority_levels},
        {level.name: level for level in new.priority_levels},
    )
    changes += _named_changes(
        "flow schema",
        {schema.name: schema for schema in old.flow_schemas},
        {schema.name: schema for schema in new.flow_schemas},
    )
    return changes


def _named_changes(kind: str, old: dict[str, object], new: dict[str, object]) -> list[str]:
    changes = [f"{kind} {name} added" for name in new if name not in old]
    changes += [f"{kind} {name} removed" for name in old if name not in new]
    changes += [f"{kind} {name} changed" for name in new if name in old and old[name] != new[name]]
    return changes
