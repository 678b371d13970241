"""The house rules of the package's layers, checked on the source with ``ast``.

docs/internals.md explains the layers. The rules:

1. **The engine is sans-IO.** ``apf_limiter/engine/`` imports none of asyncio, anyio, trio,
   time, logging, threading, socket, selectors, concurrent, subprocess and os, and nothing of
   the shell (``apf_limiter.limiter``, the clock, the observer, the top-level facade that loads
   them), the middleware (``apf_limiter.asgi``), observability, the CLI, the demo or
   ``apf_limiter.testing``. Its entry points take ``now`` and return what changed; the shell
   acts on it.
2. **Observability reads the engine's read interface only.** From ``apf_limiter.engine`` it
   imports the frozen dump (``_dump``), the statistics dataclasses (``_statistics``) and pure
   helpers (``_seat_seconds``: seat-second conversions and Go's rounding), never the
   controller, a queue set or a request. No observability or middleware source mentions
   ``_controller``, and no module outside the engine touches a queue set (the names
   ``QueueSet`` and ``queue_set``).
3. **The middleware uses the shell's public API.** ``apf_limiter/asgi/`` reads no ``_private``
   attribute of any object but ``self``/``cls`` (dunders are public), imports no ``_private``
   name from outside ``apf_limiter.asgi``, and imports the shell from ``apf_limiter.limiter``,
   not from its private modules. The jobs front door (``apf_limiter/jobs/``) keeps the same rule.
   No front door (``asgi``, ``aiohttp``, ``grpc``, ``jobs``) imports another front door's
   package: what they share lives in the gate (``apf_limiter.gate``).
4. **No import cycles** between the package's modules, counting imports under
   ``if TYPE_CHECKING:`` and inside functions: a cycle that only type checking or a deferred
   import hides is still two modules that need each other. (Importing ``a.b.c`` counts as an
   edge to ``a.b.c`` alone; a package's ``__init__`` is a facade that imports downwards.)
5. **Private modules stay private; one concept per module.** A private module (``_name.py``)
   defines no ``__all__``; each public facade (``apf_limiter``, ``apf_limiter.asgi``,
   ``apf_limiter.config``, ``apf_limiter.observability``, ``apf_limiter.testing``) does. A
   module holds one concept, whole: about 400 lines is a guide, never a reason to split a
   concept (least of all by inheritance); nothing passes 900 lines.

Private module names are compared without their leading underscores (``apf_limiter._clock`` is
the clock as much as ``apf_limiter._clock`` was), so the rules hold whatever a module is called.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = "apf_limiter"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

ENGINE_FORBIDDEN_LIBRARIES = frozenset(
    {
        "asyncio",
        "anyio",
        "trio",
        "time",
        "logging",
        "threading",
        "socket",
        "selectors",
        "concurrent",
        "subprocess",
        "os",
    }
)
"""Top-level modules the engine must not import (I/O, clocks, event loops, logging)."""

ENGINE_FORBIDDEN_MODULES = (
    "apf_limiter.limiter",
    "apf_limiter._clock",
    "apf_limiter._observer",
    "apf_limiter.gate",
    "apf_limiter.asgi",
    "apf_limiter.aiohttp",
    "apf_limiter.observability",
    "apf_limiter._cli",
    "apf_limiter._plan_render",
    "apf_limiter._demo",
    "apf_limiter.testing",
)
"""Package modules (and their submodules) above the engine, spelled without underscores."""

OBSERVABILITY_ENGINE_MODULES = (
    "apf_limiter.engine.dump",  # the read interface: frozen values, no live engine object
    "apf_limiter.engine.statistics",  # the frozen statistics dataclasses
    "apf_limiter.engine.seat_seconds",  # pure: seat-second conversions, Go's rounding
)
"""The only engine modules observability may import, spelled without underscores."""

FACADES = (
    "apf_limiter",
    "apf_limiter.aiohttp",
    "apf_limiter.asgi",
    "apf_limiter.gate",
    "apf_limiter.config",
    "apf_limiter.jobs",
    "apf_limiter.observability",
    "apf_limiter.testing",
)
GUIDE_LINES = 400  # about this many: a guide, not a cap
MAX_LINES = 900


# ---------------------------------------------------------------------------------------------
# reading the package


@dataclass(frozen=True)
class Module:
    """One module of the package, parsed."""

    name: str
    path: Path
    is_package: bool
    text: str
    tree: ast.Module

    @property
    def where(self) -> str:
        return self.path.relative_to(PACKAGE_DIR.parent).as_posix()


@dataclass(frozen=True)
class Import:
    """One imported module (or package-module name) of one ``import`` statement."""

    importer: str
    target: str  # a module of the package when the statement names one, else the module named
    name: str  # the name taken by ``from source import name``; "" for ``import target``
    line: int
    context: str  # "", "under TYPE_CHECKING" or "in a function"
    source: str = ""  # the module after ``from`` (relative imports resolved)

    def describe(self) -> str:
        what = f"from {self.source} import {self.name}" if self.name else f"import {self.target}"
        where = f"line {self.line}" + (f", {self.context}" if self.context else "")
        return f"{self.importer} ({where}: {what})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Module]:
    """Every module of the package by dotted name."""
    found: dict[str, Module] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = _module_name(path)
        tree = ast.parse(text, filename=str(path))
        found[name] = Module(name, path, path.name == "__init__.py", text, tree)
    return found


def public_spelling(name: str) -> str:
    """``apf_limiter.engine._dump`` -> ``apf_limiter.engine.dump``: rules name modules so."""
    return ".".join(part if part.startswith("__") else part.lstrip("_") for part in name.split("."))


def is_under(name: str, prefix: str) -> bool:
    spelled = public_spelling(name)
    return spelled == prefix or spelled.startswith(prefix + ".")


def is_private(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("_") and not last.startswith("__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_statements(
    node: ast.AST, context: str = ""
) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its context (type checking, function), however nested."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, context
        return
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        context = context or "in a function"
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for statement in node.body:
            yield from _import_statements(statement, "under TYPE_CHECKING")
        for statement in node.orelse:
            yield from _import_statements(statement, context)
        return
    for child in ast.iter_child_nodes(node):
        yield from _import_statements(child, context)


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.name.split(".")
    if not module.is_package:
        parts.pop()
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


_IMPORT_BY_NAME = frozenset({"import_module", "__import__"})


def _imports_by_name(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``importlib.import_module("apf_limiter....")`` and ``__import__(...)`` with a literal."""
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args),
        key=lambda node: (node.lineno, node.col_offset),
    )
    for node in calls:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if (
            called in _IMPORT_BY_NAME
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value.split(".")[0] == PACKAGE
        ):
            yield node.lineno, first.value


@cache
def imports() -> tuple[Import, ...]:
    """Every import in the package, one entry per imported module or name.

    A module loaded by name (``importlib.import_module`` or ``__import__`` with a string
    literal) counts as imported, in the context "by name".
    """
    known = modules()
    found: list[Import] = []
    for module in known.values():
        for line, target in _imports_by_name(module.tree):
            found.append(Import(module.name, target, "", line, "by name"))
        for node, context in _import_statements(module.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.append(Import(module.name, alias.name, "", node.lineno, context))
                continue
            base = _resolve(module, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in known else base
                found.append(
                    Import(module.name, target, alias.name, node.lineno, context, source=base)
                )
    return tuple(found)


def imports_of(prefix: str) -> list[Import]:
    """The imports made by the modules under ``prefix`` (spelled without underscores)."""
    return [i for i in imports() if is_under(i.importer, prefix)]


def _natural(text: str) -> list[str | int]:
    # "a.py:9" before "a.py:10": split into text and numbers (they alternate, so they compare).
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _fail(rule: str, fix: str, violations: list[str]) -> str:
    lines = "\n".join(f"  - {v}" for v in sorted(violations, key=_natural))
    return f"{rule}\n{lines}\nHow to fix: {fix} (see tests/test_layering.py, docs/internals.md)"


# ---------------------------------------------------------------------------------------------
# 1. the engine is sans-IO


def test_the_package_is_found() -> None:
    assert f"{PACKAGE}.engine" in modules(), PACKAGE_DIR
    assert len(imports()) > 100


def test_engine_imports_no_io_library() -> None:
    bad = [
        i.describe()
        for i in imports_of("apf_limiter.engine")
        if i.target.split(".")[0] in ENGINE_FORBIDDEN_LIBRARIES
    ]
    assert not bad, _fail(
        "Rule 1: the engine is sans-IO; it imports no I/O, clock, event-loop or logging library.",
        "take `now` as an argument and return what changed; the shell (apf_limiter.limiter) "
        "reads the clock, sets timers, wakes waiters and logs",
        bad,
    )


def test_engine_imports_nothing_above_it() -> None:
    bad = [
        i.describe()
        for i in imports_of("apf_limiter.engine")
        if i.target == PACKAGE
        or any(is_under(i.target, layer) for layer in ENGINE_FORBIDDEN_MODULES)
    ]
    assert not bad, _fail(
        "Rule 1: the engine imports nothing of the shell, the clock, the middleware, "
        "observability, the CLI, the demo or apf_limiter.testing.",
        "move what the engine needs into the engine (or config/digest) and let the upper "
        "layer call it",
        bad,
    )


# ---------------------------------------------------------------------------------------------
# 2. observability reads the read interface only


def test_observability_imports_only_the_engine_read_interface() -> None:
    bad = [
        i.describe()
        for i in imports_of("apf_limiter.observability")
        if is_under(i.target, "apf_limiter.engine")
        and public_spelling(i.target) not in OBSERVABILITY_ENGINE_MODULES
    ]
    assert not bad, _fail(
        "Rule 2: observability imports from the engine only "
        + ", ".join(OBSERVABILITY_ENGINE_MODULES)
        + " (underscores aside).",
        "read the frozen values of the engine's dump (Limiter.dump()) or statistics instead of "
        "the controller, queue sets or requests; a new value goes into the dump",
        bad,
    )


def test_no_observability_or_middleware_source_mentions_the_controller() -> None:
    bad = [
        f"{module.where}:{number}: {line.strip()}"
        for module in modules().values()
        if is_under(module.name, "apf_limiter.observability")
        or is_under(module.name, "apf_limiter.asgi")
        or is_under(module.name, "apf_limiter.gate")
        for number, line in enumerate(module.text.splitlines(), 1)
        if "_controller" in line
    ]
    assert not bad, _fail(
        "Rule 2: no observability or middleware code mentions `_controller` (the engine's "
        "controller is the shell's private business).",
        "use the Limiter's public methods (statistics(), dump()) or the engine's read interface",
        bad,
    )


_QUEUE_SET_NAMES = frozenset({"QueueSet", "queue_set"})


def _identifiers(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id, node.lineno
        elif isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.alias):
            yield node.name.split(".")[-1], node.lineno
            if node.asname:
                yield node.asname, node.lineno
        elif isinstance(node, ast.arg | ast.keyword) and node.arg is not None:
            yield node.arg, node.lineno
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name, node.lineno


def test_nothing_outside_the_engine_touches_a_queue_set() -> None:
    bad = list(
        {
            f"{module.where}:{line}: {name}"
            for module in modules().values()
            if not is_under(module.name, "apf_limiter.engine")
            for name, line in _identifiers(module.tree)
            if name in _QUEUE_SET_NAMES
        }
    )
    assert not bad, _fail(
        "Rule 2: only the engine touches a queue set (`QueueSet`, `queue_set`).",
        "ask the controller (an entry point or the read interface) for what the queue set knows",
        bad,
    )


# ---------------------------------------------------------------------------------------------
# 3. the middleware uses the shell's public API


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _private_accesses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if not node.attr.startswith("_") or _is_dunder(node.attr):
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            yield node.lineno, f"{ast.unparse(owner)}.{node.attr}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not _is_dunder(node.args[1].value)
        ):
            yield node.lineno, ast.unparse(node)


def test_middleware_reads_no_private_attribute_of_another_object() -> None:
    bad = [
        f"{module.where}:{line}: {text}"
        for module in modules().values()
        if is_under(module.name, "apf_limiter.asgi") or is_under(module.name, "apf_limiter.gate")
        for line, text in _private_accesses(module.tree)
    ]
    assert not bad, _fail(
        "Rule 3: the middleware reads no `_private` attribute of an object other than "
        "self/cls (an Admission's `_request`, a Limiter's `_release_unrun`, ...).",
        "give the shell a public method or property for it (documented, in its facade's API)",
        bad,
    )


def test_observability_reads_no_private_attribute_and_no_private_prometheus_name() -> None:
    bad = [
        f"{module.where}:{line}: {text}"
        for module in modules().values()
        if is_under(module.name, "apf_limiter.observability")
        for line, text in _private_accesses(module.tree)
    ] + [
        i.describe()
        for i in imports_of("apf_limiter.observability")
        if i.target.split(".")[0] == "prometheus_client"
        and any(is_private(part) for part in (*i.target.split("."), i.name) if part)
    ]
    assert not bad, _fail(
        "Rule 3: observability reads no `_private` attribute of an object other than "
        "self/cls (a PrometheusMetrics' `_series`, a prometheus_client child's `_buckets`, "
        "...) and imports no private name of prometheus_client.",
        "hand the value over (an argument, a public method) or use prometheus_client's public "
        "API (its metrics, values.ValueClass, metrics_core's families, a collector of our own)",
        bad,
    )


def test_middleware_imports_only_public_names_of_the_shell() -> None:
    bad = [
        i.describe()
        for door in ("apf_limiter.asgi", "apf_limiter.gate")
        for i in imports_of(door)
        if (is_private(i.name) and not is_under(i.target, door))
        or (is_under(i.target, "apf_limiter.limiter") and i.target != "apf_limiter.limiter")
        or (
            is_under(i.target, "apf_limiter.gate")
            and i.target != "apf_limiter.gate"
            and not is_under(i.importer, "apf_limiter.gate")
        )
    ]
    assert not bad, _fail(
        "Rule 3: the middleware imports public names only, and the shell from "
        "apf_limiter.limiter itself (not from its private modules).",
        "give what the middleware needs a public name (a public function of a private module "
        "is fine) and import the shell's names from apf_limiter.limiter",
        bad,
    )


def test_jobs_use_only_the_public_api_of_the_shell() -> None:
    bad = [
        f"{module.where}:{line}: {text}"
        for module in modules().values()
        if is_under(module.name, "apf_limiter.jobs")
        for line, text in _private_accesses(module.tree)
    ] + [
        i.describe()
        for i in imports_of("apf_limiter.jobs")
        if (is_private(i.name) and not is_under(i.target, "apf_limiter.jobs"))
        or (is_under(i.target, "apf_limiter.limiter") and i.target != "apf_limiter.limiter")
    ]
    assert not bad, _fail(
        "Rule 3: the jobs front door, like the middleware, reads no `_private` attribute of "
        "another object and imports the shell from apf_limiter.limiter itself.",
        "give the shell a public method or property for it, and import it from apf_limiter.limiter",
        bad,
    )


_FRONT_DOORS = ("apf_limiter.asgi", "apf_limiter.observability", "apf_limiter.cli")
_PROTOCOL_LIBRARIES = frozenset({"starlette", "uvicorn", "grpc", "aiohttp", "hypercorn"})


def test_the_gate_knows_no_front_door() -> None:
    bad = [
        i.describe()
        for i in imports_of("apf_limiter.gate")
        if any(is_under(i.target, door) for door in _FRONT_DOORS)
        or i.target.split(".")[0] in _PROTOCOL_LIBRARIES
    ]
    assert not bad, _fail(
        "Rule 3: the request gate (apf_limiter/gate/) is protocol-neutral: it imports no "
        "front door (the ASGI middleware, observability, the CLI) and no protocol library.",
        "put the protocol's mapping in its front door; give the gate a neutral call for it",
        bad,
    )


_PROTOCOL_FRONT_DOORS = (
    "apf_limiter.asgi",
    "apf_limiter.aiohttp",
    "apf_limiter.grpc",
    "apf_limiter.jobs",
)


def test_no_front_door_imports_another() -> None:
    bad = [
        i.describe()
        for door in _PROTOCOL_FRONT_DOORS
        for i in imports_of(door)
        if any(is_under(i.target, other) for other in _PROTOCOL_FRONT_DOORS if other != door)
    ]
    assert not bad, _fail(
        "Rule 3: each front door (asgi, aiohttp, grpc, jobs) is a thin adapter onto the gate; "
        "none imports another front door's package (its facade or its private modules).",
        "move what both need, if protocol-neutral, into the gate (apf_limiter/gate/) and import "
        "it from the gate's facade; the ASGI facade may re-export it",
        bad,
    )


# ---------------------------------------------------------------------------------------------
# 4. no import cycles


def import_graph() -> dict[str, dict[str, Import]]:
    """Module -> imported module of the package -> the (first) import making that edge."""
    known = modules()
    graph: dict[str, dict[str, Import]] = {name: {} for name in known}
    for i in imports():
        if i.target in known and i.target != i.importer:
            graph[i.importer].setdefault(i.target, i)
    return graph


def strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def shortest_cycle(graph: dict[str, dict[str, Import]], component: list[str]) -> list[Import]:
    """The imports of a shortest cycle through the component's first module."""
    members = set(component)
    start = component[0]
    came_by: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target, edge in sorted(graph[node].items()):
            if target not in members:
                continue
            if target == start:
                chain = [edge]
                while chain[0].importer != start:
                    chain.insert(0, came_by[chain[0].importer])
                return chain
            if target not in came_by:
                came_by[target] = edge
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def describe_cycles(graph: dict[str, dict[str, Import]]) -> list[str]:
    """One readable line per cycle: a chain of imports, then every module of its component."""
    described = []
    for component in strongly_connected(graph):
        chain = shortest_cycle(graph, component)
        steps = " -> ".join(edge.describe() for edge in chain)
        described.append(
            f"{steps} -> back to {chain[0].importer}"
            f"\n    (modules in this tangle: {', '.join(component)})"
        )
    return described


def test_modules_loaded_by_name_count_as_imports() -> None:
    tree = ast.parse(
        "import importlib\n"
        "def load():\n"
        "    return importlib.import_module('apf_limiter.observability')\n"
        "other = __import__('apf_limiter.config')\n"
        "elsewhere = importlib.import_module('json')\n"
    )
    assert list(_imports_by_name(tree)) == [
        (3, "apf_limiter.observability"),
        (4, "apf_limiter.config"),
    ]
    by_name = {(i.importer, i.target) for i in imports() if i.context == "by name"}
    assert ("apf_limiter.asgi._debug", "apf_limiter.observability") in by_name


def test_cycle_detection_reports_a_readable_chain() -> None:
    # A toy graph a -> b -> c -> a, with d outside the cycle.
    def edge(importer: str, target: str) -> Import:
        return Import(importer, target, "", 1, "")

    graph = {
        "a": {"b": edge("a", "b")},
        "b": {"c": edge("b", "c"), "d": edge("b", "d")},
        "c": {"a": edge("c", "a")},
        "d": {},
    }
    assert strongly_connected(graph) == [["a", "b", "c"]]
    [line] = describe_cycles(graph)
    assert line.startswith("a (line 1: import b) -> b (line 1: import c) -> c (line 1: import a)")


def test_no_import_cycles() -> None:
    cycles = describe_cycles(import_graph())
    assert not cycles, _fail(
        "Rule 4: no import cycles between modules of the package (TYPE_CHECKING and "
        "function-level imports count).",
        "move what both modules need into a third module below them, or pass it in (a "
        "callback, a protocol defined in the lower module) instead of importing upwards",
        cycles,
    )


# ---------------------------------------------------------------------------------------------
# 5. private modules, facades, size


def _defines_all(tree: ast.Module) -> bool:
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def test_private_modules_define_no_all() -> None:
    bad = [m.where for m in modules().values() if is_private(m.name) and _defines_all(m.tree)]
    assert not bad, _fail(
        "Rule 5: a private module (_name.py) defines no __all__: its names are exported, if at "
        "all, by its package's facade.",
        "delete the module's __all__ (and re-export public names from the facade's __all__)",
        bad,
    )


def test_public_facades_define_all() -> None:
    known = modules()
    bad = [
        f"{name}: {'missing' if name not in known else 'no __all__'}"
        for name in FACADES
        if name not in known or not _defines_all(known[name].tree)
    ]
    assert not bad, _fail(
        "Rule 5: every public facade defines __all__ (its exact contents are pinned by "
        "tests/test_public_api.py).",
        "list the facade's public names in __all__",
        bad,
    )


def test_no_module_is_over_900_lines() -> None:
    bad = [
        f"{m.where}: {lines} lines"
        for m in modules().values()
        if (lines := len(m.text.splitlines())) > MAX_LINES
    ]
    assert not bad, _fail(
        f"Rule 5: one concept per module; nothing passes {MAX_LINES} lines (about "
        f"{GUIDE_LINES} is a guide, not a cap).",
        "a module this long holds more than one concept: move a whole concept (not a base "
        "class of the same one) into a private module of its own",
        bad,
    )


# ---------------------------------------------------------------------------------------------
# the maintainer's page names what exists

INTERNALS = PACKAGE_DIR.parent / "docs" / "internals.md"
_PACKAGE_PATH = re.compile(
    r"`((?:apf_limiter/)?(?:engine|config|observability|asgi|limiter)/[\w/.]*)`"
)
_TEST_PATH = re.compile(r"`(tests/[\w/.-]+)`")


def test_the_internals_page_names_existing_modules_and_tests() -> None:
    text = INTERNALS.read_text(encoding="utf-8")
    missing = [
        f"`{path}`"
        for path in sorted(set(_PACKAGE_PATH.findall(text)))
        if not (PACKAGE_DIR / path.removeprefix("apf_limiter/")).exists()
    ]
    missing += [
        f"`{path}`"
        for path in sorted(set(_TEST_PATH.findall(text)))
        if not (PACKAGE_DIR.parent / path).exists()
    ]
    assert not missing, _fail(
        "docs/internals.md names modules and tests that do not exist.",
        "update docs/internals.md to the new names (the layer table, the Kubernetes map, the "
        "hot-path table)",
        missing,
    )


# Documents that are not part of the repository: a maintainer could not follow a citation.
_OUTSIDE_DOCUMENTS = ("kubernetes-apf" + ".md", "design" + ".md")


def test_nothing_cites_a_document_outside_the_repository() -> None:
    root = PACKAGE_DIR.parent
    # (The compiled build's copy of the tree, build/compiled, has no README.)
    files = [path for path in [root / "README.md"] if path.exists()]
    for folder in ("apf_limiter", "tests", "benchmarks", "examples", "docs"):
        if not (root / folder).is_dir():
            continue
        files.extend(
            path
            for path in (root / folder).rglob("*")
            if path.suffix in (".py", ".md", ".yaml", ".toml", ".html", ".js")
        )
    cited = [
        f"{path.relative_to(root)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if any(name in line for name in _OUTSIDE_DOCUMENTS)
    ]
    assert not cited, (
        "These lines cite a document that is not in the repository; cite docs/internals.md "
        f"or the upstream Kubernetes source file and function instead: {cited}"
    )
