"""The queue set is one concept, whole, behind a narrow interface.

``QueueSet`` lives in one module with no base class, and the other engine modules (the level,
the controller, the dumps) use only the members of the ``FairQueueSet`` protocol, in the
spirit of upstream's ``fq.QueueSet`` (``fairqueuing/interface.go``). The check reads the
source: any attribute read through a name ``queue_set`` or ``qs``, or through an attribute
``.queue_set``, must be a member of the protocol.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from apf_limiter.engine import _queueset
from apf_limiter.engine._queueset import QueueSet
from apf_limiter.engine._request import FairQueueSet

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "apf_limiter" / "engine"
_NAMES = {"queue_set", "qs"}


def interface_members() -> set[str]:
    """The members the ``FairQueueSet`` protocol declares (read from its source)."""
    tree = ast.parse((ENGINE / "_request.py").read_text(encoding="utf-8"))
    protocol = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == FairQueueSet.__name__
    )
    return {
        node.name
        for node in protocol.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("__")
    }


def members_used(source: str) -> list[tuple[int, str]]:
    """(line, member) of each attribute read off a queue set in ``source``."""
    used = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id in _NAMES) or (
            isinstance(owner, ast.Attribute) and owner.attr == "queue_set"
        ):
            used.append((node.lineno, node.attr))
    return used


def test_the_interface_is_narrow_and_queue_set_implements_all_of_it() -> None:
    members = interface_members()
    assert {"configure", "start_request", "finish", "is_idle", "update_observations", "dump"} <= (
        members
    )
    assert len(members) <= 16, "the interface is meant to stay narrow"
    qs = QueueSet("l", desired_num_queues=4, queue_length_limit=5, hand_size=2,
                  concurrency_limit=3, now=0.0)  # fmt: skip
    for name in members:
        assert hasattr(qs, name), f"QueueSet lacks the interface member {name}"


def test_no_other_engine_module_reads_a_queue_set_beyond_its_interface() -> None:
    members = interface_members()
    bad = [
        f"apf_limiter/engine/{path.name}:{line}: .{member}"
        for path in sorted(ENGINE.glob("*.py"))
        if path.name != "_queueset.py"
        for line, member in members_used(path.read_text(encoding="utf-8"))
        if member not in members
    ]
    assert not bad, (
        "These engine modules read queue set members outside its interface (FairQueueSet in "
        "engine/_request.py): use an interface member (counts(), dump(), ...) or, if the "
        f"interface truly lacks one, add it to the protocol: {bad}"
    )


def test_the_check_sees_a_member_read() -> None:
    source = "def f(level, qs):\n    level.queue_set.seats_in_use\n    qs.lingering\n"
    assert members_used(source) == [(2, "seats_in_use"), (3, "lingering")]


def test_the_queue_set_is_whole_in_one_module() -> None:
    # A concept is never split by inheritance to fit a line count.
    assert QueueSet.__mro__[1:] == (object,)
    assert inspect.getmodule(QueueSet) is _queueset or QueueSet.__module__ == _queueset.__name__
    assert not (ENGINE / "_queueset_base.py").exists()
