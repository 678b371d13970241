"""The modules compiled with mypyc, read from pyproject.toml: the one list of them.

The wheel's build hook (``[tool.hatch.build.targets.wheel.hooks.mypyc]``) compiles every
``.py`` file named by its ``include`` entries (a directory stands for every file beneath it)
that no ``exclude`` entry names. ``make compile`` runs this script to compile the same files,
and ``tests/test_public_api.py`` checks the list. Entries are plain paths, not glob patterns,
so that this expansion and the hook's (gitignore-style matching) agree.

Usage: ``python mypyc_modules.py`` prints the files, one per line, relative to the project root.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def mypyc_settings(root: Path = ROOT) -> tuple[list[str], list[str]]:
    """Return the build hook's ``include`` and ``exclude`` entries, as written."""
    with (root / "pyproject.toml").open("rb") as file:
        pyproject = tomllib.load(file)
    hook = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return list(hook["include"]), list(hook.get("exclude", []))


def _expand(root: Path, entries: list[str]) -> set[str]:
    files: set[str] = set()
    for entry in entries:
        path = root / entry
        if path.is_dir():
            files.update(p.relative_to(root).as_posix() for p in path.rglob("*.py"))
        elif path.suffix == ".py" and path.is_file():
            files.add(path.relative_to(root).as_posix())
        else:
            raise ValueError(
                f"pyproject.toml: mypyc entry {entry!r} is neither a directory nor a .py file "
                "(entries are plain paths relative to the project root)"
            )
    return files


def mypyc_modules(root: Path = ROOT) -> list[str]:
    """Return the files to compile, sorted, as paths relative to ``root``.

    Raises:
        ValueError: If an entry names no directory or ``.py`` file.
    """
    include, exclude = mypyc_settings(root)
    return sorted(_expand(root, include) - _expand(root, exclude))


if __name__ == "__main__":
    try:
        print("\n".join(mypyc_modules()))
    except ValueError as error:
        sys.exit(str(error))
