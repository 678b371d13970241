"""The public API contract (design.md §2): exact exports, docstrings, typed package."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import apf_limiter

CONTRACT = [
    "APFMiddleware",
    "Admission",
    "ConfigError",
    "ConfigProblem",
    "Configuration",
    "Dealer",
    "FlowSchemaStatistics",
    "Limiter",
    "LimiterStatistics",
    "PriorityLevelStatistics",
    "Rejected",
    "RequestDigest",
    "__version__",
    "load_config",
]


def test_all_is_exactly_the_contract() -> None:
    assert sorted(apf_limiter.__all__) == sorted(CONTRACT)
    for name in CONTRACT:
        assert getattr(apf_limiter, name) is not None


def test_design_imports_work() -> None:
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


def _modules() -> list[str]:
    names = ["apf_limiter"]
    for info in pkgutil.walk_packages(apf_limiter.__path__, "apf_limiter."):
        names.append(info.name)
    return names


def test_every_module_declares_all_and_documents_its_public_names() -> None:
    for name in _modules():
        module = importlib.import_module(name)
        doc = module.__doc__
        source = Path(module.__file__ or "")
        if source.suffix != ".py":
            # A mypyc-compiled module keeps no docstring: read it from its source.
            python = source.with_name(source.name.split(".")[0] + ".py")
            doc = ast.get_docstring(ast.parse(python.read_text()))
        assert doc, f"{name} has no module docstring"
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        for public in exported:
            obj = getattr(module, public)
            assert obj is not None or public.isupper(), f"{name}.{public} is missing"
            compiled = source.suffix != ".py"  # mypyc drops docstrings; the pure run checks
            defined_here = getattr(obj, "__module__", None) == name
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and defined_here and not compiled:
                assert inspect.getdoc(obj), f"{name}.{public} has no docstring"


def test_package_is_typed() -> None:
    assert (Path(apf_limiter.__file__).parent / "py.typed").exists()


def test_missing_attribute_raises_attribute_error() -> None:
    try:
        apf_limiter.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_compiled_build_is_really_compiled() -> None:
    # make test-compiled sets APF_EXPECT_COMPILED: the suite must then run the mypyc modules.
    import os

    import apf_limiter.engine.queueset
    import apf_limiter.limiter

    compiled = [
        module.__file__ or ""
        for module in (apf_limiter.engine.queueset, apf_limiter.limiter)
        if not (module.__file__ or "").endswith(".py")
    ]
    if os.environ.get("APF_EXPECT_COMPILED"):
        assert len(compiled) == 2, compiled
    else:
        assert compiled == []
