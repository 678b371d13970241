"""The refactor harness: deterministic, and a change in any outcome is found and located."""

from __future__ import annotations

import copy
import json
from typing import Any

from benchmarks import equivalence


def _record(value: Any) -> dict[str, Any]:
    plain = json.loads(json.dumps(value, sort_keys=True, default=repr))
    return {"traces": {"digest": equivalence._digest(plain), "value": plain}}


def test_traces_are_deterministic_and_substantial() -> None:
    first, second = equivalence.traces(3), equivalence.traces(3)
    assert first == second
    kinds = {rec[0] for trace in first for _, recs in trace["outcomes"] for rec in recs}
    assert {"admitted", "done", "rejected"} <= kinds
    assert all(trace["events"] and trace["snapshots"] for trace in first)


def test_compare_finds_and_locates_a_changed_wait() -> None:
    before = _record(equivalence.traces(2))
    value = copy.deepcopy(before["traces"]["value"])
    _ident, records = value[1]["outcomes"][0]
    records[0] = [*records[0][:-1], "changed"]
    after = _record(value)
    assert equivalence.compare(before, before) == []
    [difference] = equivalence.compare(before, after)
    assert difference.startswith("traces: traces[1]/outcomes[0]")
