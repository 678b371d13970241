"""A request's states and the events that move them: one table, one function, no other writer.

``TRANSITIONS`` (``engine/_request.py``) is the whole state machine of a request, as h11's
``_state.py`` is a connection's; ``transition`` is the only code that assigns ``Request.state``
after construction, but for two hot-path copies (listed below and in docs/internals.md). These
tests pin the table's shape, the function's refusals, the absence of any other writer in the
package's source, and docs/internals.md's table of moves.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import (
    TRANSITIONS,
    Request,
    RequestEvent,
    RequestState,
    transition,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "apf_limiter"
FINAL = {RequestState.DONE, RequestState.REJECTED, RequestState.TIMED_OUT, RequestState.CANCELLED}


def test_final_states_have_no_way_out_and_every_other_state_has_one() -> None:
    sources = {state for state, _ in TRANSITIONS}
    assert sources.isdisjoint(FINAL)
    assert sources == set(RequestState) - FINAL
    # Every state but NEW is reached by some move; every event is used.
    assert set(TRANSITIONS.values()) == set(RequestState) - {RequestState.NEW}
    assert {event for _, event in TRANSITIONS} == set(RequestEvent)


def test_every_move_in_the_table_applies_and_every_other_raises() -> None:
    for state in RequestState:
        for event in RequestEvent:
            request = Request("s", "l")
            request.state = state  # a test may build any state by hand
            if (state, event) in TRANSITIONS:
                transition(request, event)
                assert request.state is TRANSITIONS[(state, event)]
            else:
                with pytest.raises(RuntimeError, match=f"illegal transition: {event.name}"):
                    transition(request, event)
                assert request.state is state, "a refused event must leave the state alone"


def test_a_request_ends_exactly_once() -> None:
    request = Request("s", "l")
    transition(request, RequestEvent.DISPATCH)
    transition(request, RequestEvent.FINISH)
    for event in RequestEvent:
        with pytest.raises(RuntimeError, match="illegal transition"):
            transition(request, event)


def test_the_queue_set_moves_requests_only_through_the_table() -> None:
    # A lingering request released twice is refused by the table (through the queue set's own
    # guard first), and an ended wait cannot be dispatched.
    qs = QueueSet("l", desired_num_queues=1, queue_length_limit=10, hand_size=1,
                  concurrency_limit=1, now=0.0)  # fmt: skip
    running = Request("s", "l", additional_latency=1.0, final_seats=1)
    waiting = Request("s", "l")
    qs.start_request(running, 0.0)
    qs.start_request(waiting, 0.0)
    assert (running.state, waiting.state) == (RequestState.EXECUTING, RequestState.WAITING)
    qs.cancel(waiting, 0.5, timed_out=True)
    assert waiting.state is RequestState.TIMED_OUT
    with pytest.raises(RuntimeError, match="illegal transition"):
        transition(waiting, RequestEvent.DISPATCH)
    qs.finish(running, 1.0)
    states = [running.state]
    qs.release(running, 2.0)
    states.append(running.state)
    assert states == [RequestState.LINGERING, RequestState.DONE]
    with pytest.raises(RuntimeError):
        qs.release(running, 3.0)


def _state_writers(path: Path) -> list[str]:
    """Every place in ``path`` that assigns an attribute ``state`` (or sets it by name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    where: list[str] = []
    scopes: dict[ast.AST, str] = {}  # node -> the innermost class or function around it
    for node in ast.walk(tree):  # outer scopes first: inner ones overwrite them
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            for child in ast.walk(node):
                if child is not node:
                    scopes[child] = node.name
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "state"
        ):
            where.append(f"{label}:{node.lineno} (setattr, in {scopes.get(node)})")
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr == "state":
                    where.append(f"{label}:{part.lineno} (in {scopes.get(node)})")
    return where


# Where a request's state may be assigned: Request.__init__ (NEW), transition() (every move),
# and the two hot-path copies of transition() that docs/internals.md lists, each right after a
# guard on the current state (the fast path of start_request: NEW -> EXECUTING; the release of
# seats by finish and release: EXECUTING or LINGERING -> DONE). The state machine test
# (test_queueset_state_machine.py) checks every state change the queue set makes against the
# table, these copies included.
ALLOWED_WRITERS = {
    ("engine/_request.py", "__init__"),
    ("engine/_request.py", "transition"),
    ("engine/_queueset.py", "start_request"),
    ("engine/_queueset.py", "_release_seats"),
}


def test_no_module_but_the_table_assigns_a_requests_state() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for where in _state_writers(path):
            scope = where.rsplit("in ", 1)[1].rstrip(")")
            if (module, scope) not in ALLOWED_WRITERS or "setattr" in where:
                bad.append(where)
    assert not bad, (
        "Only transition() in engine/_request.py (and Request.__init__, and the listed "
        "hot-path copies) may assign a request's state: apply a RequestEvent with "
        "transition(request, event) instead, and add the move to TRANSITIONS if it is new. "
        f"Found: {bad}"
    )


def test_each_hot_path_copy_assigns_the_state_its_move_leads_to() -> None:
    source = (PACKAGE / "engine" / "_queueset.py").read_text(encoding="utf-8")
    assigned: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name in {"start_request", "_release_seats"}:
            for part in ast.walk(node):
                if (
                    isinstance(part, ast.Assign)
                    and isinstance(part.targets[0], ast.Attribute)
                    and part.targets[0].attr == "state"
                ):
                    assert isinstance(part.value, ast.Name)
                    assigned.setdefault(node.name, set()).add(part.value.id)
    assert assigned == {"start_request": {"_EXECUTING"}, "_release_seats": {"_DONE"}}
    assert TRANSITIONS[(RequestState.NEW, RequestEvent.DISPATCH)] is RequestState.EXECUTING
    assert TRANSITIONS[(RequestState.EXECUTING, RequestEvent.FINISH)] is RequestState.DONE
    assert TRANSITIONS[(RequestState.LINGERING, RequestEvent.RELEASE)] is RequestState.DONE


def test_the_writer_check_sees_an_assignment(tmp_path: Path) -> None:
    # The check above must not pass by seeing nothing.
    sample = tmp_path / "writer.py"
    sample.write_text(
        "class Q:\n    def f(self, r):\n        r.state = 1\n        setattr(r, 'state', 2)\n"
    )
    assert _state_writers(sample) == ["writer.py:3 (in f)", "writer.py:4 (setattr, in f)"]


def test_the_internals_page_lists_exactly_the_moves_of_the_table() -> None:
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    row = re.compile(r"^\| `(\w+)` → `(\w+)` \|", re.MULTILINE)
    documented = {(RequestState[a], RequestState[b]) for a, b in row.findall(text)}
    assert documented == {(state, new) for (state, _), new in TRANSITIONS.items()}
