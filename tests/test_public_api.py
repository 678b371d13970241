"""The public API contract (design.md §2): exact exports, docstrings, typed package."""

from __future__ import annotations

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
        assert module.__doc__, f"{name} has no module docstring"
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        for public in exported:
            obj = getattr(module, public)
            assert obj is not None or public.isupper(), f"{name}.{public} is missing"
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == name:
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
