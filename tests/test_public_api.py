"""The public API contract: the facades' exact exports, docstrings, the typed package, and the
optional compiled build.

The public API is what the six facades export in ``__all__``: ``apf_limiter``,
``apf_limiter.asgi``, ``apf_limiter.config``, ``apf_limiter.jobs``,
``apf_limiter.observability`` and ``apf_limiter.testing``. Everything else lives in private
modules (``_name.py``, without ``__all__``; tests/test_layering.py checks that). Changing a
contract below is changing the API.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import apf_limiter
from mypyc_modules import mypyc_modules, mypyc_settings

ROOT = Path(__file__).resolve().parents[1]

CONTRACT = [
    "APFMiddleware",
    "Admission",
    "ConfigError",
    "ConfigProblem",
    "Configuration",
    "Dealer",
    "EngineDump",
    "FlowCount",
    "FlowSchemaStatistics",
    "LevelDump",
    "Limiter",
    "LimiterStatistics",
    "Phase",
    "PriorityLevelStatistics",
    "QueueDump",
    "Rejected",
    "RequestDigest",
    "RequestDump",
    "ShadowOutcome",
    "WaitingSummary",
    "__version__",
    "load_config",
]

ASGI_CONTRACT = [
    "APFMiddleware",
    "BodyBuffer",
    "DEBUG_PATH",
    "DebugEndpoints",
    "Identity",
    "IdentityHooks",
    "REJECTION_DETAIL",
    "ResourceAttributes",
    "ResponseHeaders",
    "RouteOptions",
    "ScopeHeaders",
    "SlowClients",
    "WEBSOCKET_TRY_AGAIN_LATER",
    "WorkEstimate",
    "build_digest",
    "default_identify",
    "route_options",
    "route_path",
]

CONFIG_CONTRACT = [
    "Configuration",
    "ExemptPriorityLevelConfiguration",
    "FlowDistinguisherMethod",
    "FlowSchema",
    "LimitResponse",
    "LimitedPriorityLevelConfiguration",
    "MANDATORY_FLOW_SCHEMAS",
    "MANDATORY_PRIORITY_LEVELS",
    "NonResourcePolicyRule",
    "PolicyRulesWithSubjects",
    "PriorityLevel",
    "QueuingConfiguration",
    "ResourcePolicyRule",
    "Subject",
    "default_configuration",
    "dump_config",
    "kubernetes_bootstrap_configuration",
    "load_config",
    "load_config_text",
]

OBSERVABILITY_CONTRACT = [
    "DEBUG_PREFIX",
    "METRICS",
    "DebugApp",
    "Dump",
    "MetricSpec",
    "MetricsApp",
    "Observer",
    "PrometheusMetrics",
    "dashboard_feed",
    "debug_app",
    "dump_priority_levels",
    "dump_queues",
    "dump_requests",
    "dump_top_flows",
    "metrics_app",
]

JOBS_CONTRACT = ["Job", "admit_with_retry", "guard", "guarded"]

TESTING_CONTRACT = ["FakeClock"]

GATE_CONTRACT = [
    "BODY",
    "BODY_RATE_DETAIL",
    "BodyClock",
    "CLIENT_CLOSED_REQUEST",
    "ClientDeadlines",
    "DEADLINE",
    "DEADLINE_DETAIL",
    "EVERY_SCHEMA",
    "Gate",
    "Identity",
    "LONG_RUNNING_RETRY_AFTER",
    "MARKED_ENDPOINTS",
    "NO_HEADERS",
    "REJECTION_DETAIL",
    "ROUTE_OPTIONS_ATTRIBUTE",
    "ResourceAttributes",
    "ResponseHeaders",
    "RouteOptions",
    "SlowClients",
    "Ticket",
    "WorkEstimate",
    "endpoint_options",
    "header_name",
    "header_timeout",
    "identity_names",
    "json_detail",
    "route_options",
    "seconds_value",
    "shadow_value",
]

AIOHTTP_CONTRACT = [
    "AiohttpMiddleware",
    "DISCONNECT_POLL",
    "IdentifyHook",
    "LongRunningHook",
    "RejectHook",
    "setup",
]

GRPC_CONTRACT = [
    "APFInterceptor",
    "FLOW_SCHEMA_KEY",
    "PRIORITY_LEVEL_KEY",
    "QUEUE_WAIT_KEY",
    "REASON_KEY",
    "RETRY_PUSHBACK_KEY",
    "SHADOW_KEY",
    "peer_host",
]

FACADES = {
    "apf_limiter": CONTRACT,
    "apf_limiter.aiohttp": AIOHTTP_CONTRACT,
    "apf_limiter.asgi": ASGI_CONTRACT,
    "apf_limiter.config": CONFIG_CONTRACT,
    "apf_limiter.jobs": JOBS_CONTRACT,
    "apf_limiter.gate": GATE_CONTRACT,
    "apf_limiter.grpc": GRPC_CONTRACT,
    "apf_limiter.observability": OBSERVABILITY_CONTRACT,
    "apf_limiter.testing": TESTING_CONTRACT,
}


@pytest.mark.parametrize("facade", sorted(FACADES))
def test_each_facade_exports_exactly_its_contract(facade: str) -> None:
    module = importlib.import_module(facade)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{facade} has no __all__"
    assert sorted(exported) == sorted(FACADES[facade])
    assert len(set(exported)) == len(exported), f"{facade}.__all__ repeats a name"
    for name in exported:
        assert getattr(module, name) is not None, f"{facade}.{name} is missing"


def test_admission_phase_is_exported() -> None:
    # Admission.phase returns it: a caller must be able to compare with its members.
    from apf_limiter import Limiter, Phase, RequestDigest

    admission = Limiter().admit(RequestDigest(user="u"))
    assert admission.phase is Phase.NEW
    assert [phase.value for phase in Phase] == ["new", "queued", "admitted", "ended"]


def test_documented_imports_work() -> None:
    from apf_limiter import (  # noqa: F401
        Admission,
        APFMiddleware,
        ConfigError,
        Dealer,
        Limiter,
        Rejected,
        RequestDigest,
        load_config,
    )
    from apf_limiter.testing import FakeClock  # noqa: F401


def test_what_limiter_dump_returns_is_public_and_annotatable() -> None:
    # A user annotates a dump with the public names: they are the very types it is built of.
    from apf_limiter import EngineDump, FlowCount, LevelDump, QueueDump, RequestDump, WaitingSummary
    from apf_limiter.testing import FakeClock

    limiter = apf_limiter.Limiter(hash_seed=1, clock=FakeClock())
    dump: EngineDump = limiter.dump()
    assert type(dump) is EngineDump
    level: LevelDump = dump.levels[0]
    assert type(level) is LevelDump
    for level in dump.levels:
        assert all(type(queue) is QueueDump for queue in level.queues)
        assert all(type(flow) is FlowCount for flow in level.rejected_flows)
    assert RequestDump._fields[0] == "flow_schema"
    summary = limiter.dump(waiting=False).levels[0].waiting_summary
    assert type(summary) is WaitingSummary


# ---------------------------------------------------------------------------------------------
# docstrings, read from the sources (a mypyc-compiled module keeps none)


def _modules() -> list[str]:
    names = ["apf_limiter"]
    for info in pkgutil.walk_packages(apf_limiter.__path__, "apf_limiter."):
        names.append(info.name)
    return names


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _tree(module: str) -> ast.Module:
    path = _source(module)
    assert path is not None, f"no source for {module}"
    return ast.parse(path.read_text(encoding="utf-8"))


def test_every_module_imports_and_has_a_docstring() -> None:
    # Private modules included: the docstring says what the module is for.
    for name in _modules():
        importlib.import_module(name)
        assert ast.get_docstring(_tree(name)), f"{name} has no module docstring"


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def _bodies(tree: ast.Module) -> list[list[ast.stmt]]:
    """The module's body and the bodies of its top-level ``if`` and ``try`` statements."""
    bodies = [tree.body]
    for node in tree.body:
        if isinstance(node, ast.If):
            bodies += [node.body, node.orelse]
        elif isinstance(node, ast.Try):
            bodies += [node.body, *(handler.body for handler in node.handlers), node.orelse]
    return bodies


def _definition(module: str, name: str, hops: int = 0) -> tuple[str, list[ast.stmt], int] | None:
    """Where ``module.name`` is defined: (module, the statements around it, its index)."""
    tree = _tree(module)
    for body in _bodies(tree):
        for index, node in enumerate(body):
            if _defines(node, name):
                return module, body, index
    if hops > 5:
        return None
    for statement in ast.walk(tree):
        if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    return _definition(statement.module, alias.name, hops + 1)
    return None


def _documented(module: str, body: list[ast.stmt], index: int) -> bool:
    node = body[index]
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return bool(ast.get_docstring(node))
    # A constant: a string right after it, or a "#:" comment right above it (Sphinx style).
    following = body[index + 1] if index + 1 < len(body) else None
    if (
        isinstance(following, ast.Expr)
        and isinstance(following.value, ast.Constant)
        and isinstance(following.value.value, str)
    ):
        return True
    path = _source(module)
    assert path is not None
    lines = path.read_text(encoding="utf-8").splitlines()
    return node.lineno >= 2 and lines[node.lineno - 2].strip().startswith("#:")


@pytest.mark.parametrize("facade", sorted(FACADES))
def test_every_public_name_of_a_facade_is_documented(facade: str) -> None:
    undocumented = []
    for name in FACADES[facade]:
        if name.startswith("__"):
            continue  # __version__
        found = _definition(facade, name)
        if found is None:
            undocumented.append(f"{name} (no definition found)")
        elif not _documented(*found):
            undocumented.append(f"{name} (defined in {found[0]})")
    assert not undocumented, (
        f"public names of {facade} without a docstring (a constant takes a string after it "
        f"or a '#:' comment above it): {', '.join(undocumented)}"
    )


def test_package_is_typed() -> None:
    assert (Path(apf_limiter.__file__).parent / "py.typed").exists()


def test_missing_attribute_raises_attribute_error() -> None:
    try:
        apf_limiter.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


# ---------------------------------------------------------------------------------------------
# the optional mypyc build: one list of modules, in pyproject.toml


def test_the_mypyc_list_names_existing_modules_and_covers_the_engine_and_the_shell() -> None:
    include, exclude = mypyc_settings(ROOT)
    for entry in (*include, *exclude):
        assert not set(entry) & set("*?[]!"), (
            f"pyproject.toml, mypyc hook: {entry!r} must be a plain path (mypyc_modules.py and "
            "the build hook agree only on plain paths)"
        )
        assert (ROOT / entry).exists(), f"pyproject.toml, mypyc hook: {entry!r} does not exist"
    files = mypyc_modules(ROOT)  # what `make compile` and the wheel's build hook compile
    for file in files:
        assert file.startswith("apf_limiter/") and (ROOT / file).is_file(), file
        assert not file.endswith("__init__.py"), f"{file}: package facades stay pure Python"
    shell = ROOT / "apf_limiter" / "limiter"
    hot = [*(ROOT / "apf_limiter" / "engine").rglob("*.py")]
    hot += shell.rglob("*.py") if shell.is_dir() else [shell.with_suffix(".py")]
    expected = {p.relative_to(ROOT).as_posix() for p in hot if p.name != "__init__.py"}
    missing = sorted(expected - set(files))
    assert not missing, f"engine and shell modules missing from the mypyc list: {missing}"


def test_compiled_build_is_really_compiled() -> None:
    # make test-compiled sets APF_EXPECT_COMPILED: the suite must then run the mypyc modules.
    names = [file.removesuffix(".py").replace("/", ".") for file in mypyc_modules(ROOT)]
    compiled = [
        name for name in names if not (importlib.import_module(name).__file__ or "").endswith(".py")
    ]
    if os.environ.get("APF_EXPECT_COMPILED"):
        assert compiled == names, sorted(set(names) - set(compiled))
    else:
        assert compiled == []


def test_importing_the_package_does_not_load_the_configuration_parser() -> None:
    # A program that builds its Configuration itself, or only imports apf_limiter, does not pay
    # for the loader, the validation and the built-in configurations; they load at first use.
    code = (
        "import sys, apf_limiter\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('apf_limiter.config.'))\n"
        "print(loaded)\n"
        "apf_limiter.load_config({})\n"
        "print('apf_limiter.config._sources' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded, used = result.stdout.splitlines()
    assert ast.literal_eval(loaded) == [
        "apf_limiter.config._changes",  # the mode in words, for the log (the model alone)
        "apf_limiter.config._model",
        "apf_limiter.config._names",
        "apf_limiter.config._settings",
    ]
    assert used == "True"
