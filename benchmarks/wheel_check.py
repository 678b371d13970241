"""The wheels of ``make wheel`` are real installs: pure where it should be, compiled where not.

Run: ``.venv/bin/python -m benchmarks.wheel_check`` (after ``make wheel``; ``make wheel-check``
does both). Checks, reading the module list from ``mypyc_modules.py``:

1. the pure wheel (``py3-none-any``) holds no extension module and every source;
2. the compiled wheel holds an extension module for every module of the list;
3. the compiled wheel, installed into a fresh virtualenv (``build/wheel-check/venv``, with the
   ``dev`` extra for the tests), imports every module of the list from an extension module,
   from that virtualenv, not from this checkout;
4. there, ``examples/worker_pool.py`` runs standalone, and a smoke test passes: the examples'
   tests (the Starlette and FastAPI apps under uvicorn), the limiter's and the Kubernetes
   traces' tests. They run from a copy of ``tests/`` and ``examples/`` in a directory without
   ``apf_limiter/``, so that nothing shadows the installed package.

Exits with status 1, saying why, if a check fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from mypyc_modules import mypyc_modules

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
WORK = ROOT / "build" / "wheel-check"
SMOKE_TESTS = [
    "tests/asgi/test_examples.py",
    "tests/limiter/test_limiter.py",
    "tests/engine/test_upstream_traces.py",
]
_PROBE = """
import importlib, json, sys
names = json.loads(sys.argv[1])
files = {name: importlib.import_module(name).__file__ or "" for name in names}
print(json.dumps(files))
"""


class CheckFailed(Exception):
    """A check failed; the message says which and why."""


def _the_wheel(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    if len(found) != 1:
        raise CheckFailed(f"expected one wheel {pattern} in {DIST} (make wheel), found {found}")
    return found[0]


def _run(command: list[str], cwd: Path, timeout: float = 900) -> str:
    shown = " ".join(command)
    print("$", shown if len(shown) < 160 else shown[:157] + "...", flush=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise CheckFailed(f"{command[:3]}... failed ({done.returncode}):\n{done.stdout[-3000:]}"
                          f"\n{done.stderr[-3000:]}")  # fmt: skip
    return done.stdout


def check_contents(pure: Path, compiled: Path, modules: list[str]) -> None:
    """Checks 1 and 2: what each wheel holds."""
    pure_names = zipfile.ZipFile(pure).namelist()
    if not pure.name.endswith("-py3-none-any.whl"):
        raise CheckFailed(f"{pure.name}: the pure wheel should be tagged py3-none-any")
    if [name for name in pure_names if name.endswith((".so", ".pyd"))]:
        raise CheckFailed(f"{pure.name} holds extension modules")
    missing = [m for m in modules if m not in pure_names]
    if missing:
        raise CheckFailed(f"{pure.name} lacks {missing}")
    compiled_names = zipfile.ZipFile(compiled).namelist()
    stems = {name.split(".", 1)[0] for name in compiled_names if name.endswith((".so", ".pyd"))}
    missing = [m for m in modules if m.removesuffix(".py") not in stems]
    if missing:
        raise CheckFailed(f"{compiled.name} has no extension module for {missing}")
    print(f"ok: {pure.name} is pure; {compiled.name} compiles all {len(modules)} modules")


def check_install(compiled: Path, modules: list[str]) -> None:
    """Checks 3 and 4: a fresh virtualenv with the compiled wheel; examples and smoke tests."""
    shutil.rmtree(WORK, ignore_errors=True)
    run_dir = WORK / "run"
    run_dir.mkdir(parents=True)
    for name in ("tests", "examples"):
        shutil.copytree(ROOT / name, run_dir / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", run_dir)  # pytest's settings (asyncio mode, time-out)
    venv = WORK / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], WORK)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", f"{compiled}[dev,yaml,prometheus]"], WORK)
    names = [m.removesuffix(".py").replace("/", ".") for m in modules]
    files: dict[str, str] = json.loads(_run([python, "-c", _PROBE, json.dumps(names)], run_dir))
    site = str(venv.resolve())
    wrong = {n: f for n, f in files.items() if f.endswith(".py") or not f.startswith(site)}
    if wrong:
        raise CheckFailed(f"not imported as compiled from the virtualenv: {wrong}")
    print(f"ok: all {len(names)} modules import compiled from {venv}")
    _run([python, "examples/worker_pool.py", "--seconds", "1"], run_dir)
    print("ok: examples/worker_pool.py")
    output = _run([python, "-m", "pytest", "-q", "-p", "no:randomly", *SMOKE_TESTS], run_dir)
    print("ok: smoke tests,", output.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run the checks; 0 if all pass."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--contents-only", action="store_true", help="checks 1 and 2 only")
    args = parser.parse_args(argv)
    try:
        modules = mypyc_modules(ROOT)
        pure = _the_wheel("apf_limiter-*-py3-none-any.whl")
        compiled = _the_wheel("apf_limiter-*-cp*.whl")
        check_contents(pure, compiled, modules)
        if not args.contents_only:
            check_install(compiled, modules)
    except (CheckFailed, subprocess.TimeoutExpired) as error:
        print(f"wheel check FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
