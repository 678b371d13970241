"""Writing a benchmark's JSON result file, and keeping smoke tests off the committed ones."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_result"]


def write_result(
    result: dict[str, Any], out: Path, *, default: Path, quick: bool, indent: int | None = 1
) -> Path:
    """Write ``result`` as JSON to ``out`` and say where.

    A smoke test (``--quick``) measures nothing worth keeping: without an ``--out`` of its own
    it writes to the temporary directory, not over the committed result in
    ``benchmarks/results/``.

    Returns:
        The file written.
    """
    if quick and out == default:
        out = Path(tempfile.gettempdir()) / f"apf-quick-{default.name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=indent) + "\n")
    print(f"Results written to {out}")
    return out
