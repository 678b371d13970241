"""Instructions per operation under ``valgrind --tool=callgrind``: deterministic costs.

On these noisy shared cores a time ratio moves by tens of percent between rounds; an
instruction count does not move at all for the same build, inputs and environment (the hash
seed fixed, here, so that string hashing lays dicts out the same way every run). A
command is run twice under callgrind, doing ``short`` and ``long`` operations after the same
start-up, and the difference of the two totals divided by ``long - short`` is the count per
operation (start-up, imports and warm-up cancel out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["available", "instructions_per_operation", "total_instructions"]


def available() -> bool:
    """Whether ``valgrind`` is installed."""
    return shutil.which("valgrind") is not None


def total_instructions(command: list[str], cwd: Path) -> int:
    """The instructions callgrind counts for one run of ``command`` (in ``cwd``).

    Raises:
        RuntimeError: If the command fails or callgrind reports no total.
    """
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *command],
            cwd=cwd,
            # A fixed hash seed: string hashes decide dict and set layouts, and with them a
            # few thousand instructions per run.
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def instructions_per_operation(
    command: list[str], count_option: str, short: int, long: int, cwd: Path
) -> float:
    """Instructions per operation: ``command`` run with ``count_option short`` and ``long``.

    Args:
        command: The command without the count (e.g. ``[python, -m, module, --serve, x]``).
        count_option: The option that sets how many operations it does (e.g. ``--requests``).
        short: Operations in the short run.
        long: Operations in the long run (more than ``short``).
        cwd: Where to run it.
    """
    extra = total_instructions([*command, count_option, str(long)], cwd) - total_instructions(
        [*command, count_option, str(short)], cwd
    )
    return extra / (long - short)
