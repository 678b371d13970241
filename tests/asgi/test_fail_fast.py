"""A bad configuration stops the app at import, not at the first request (issue 28, item 1).

The README's FastAPI quickstart is run as written (its placeholders stubbed): with a missing or
invalid ``apf.yaml``, importing the module raises the ``ConfigError`` with its field paths, and a
real ``uvicorn`` exits instead of starting a server that answers 500 to every request.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from apf_limiter import ConfigError
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send

README = Path(__file__).resolve().parents[2] / "README.md"

#: What the README leaves to the reader: an authentication backend and an event generator.
_STUBS = """
from starlette.authentication import AuthenticationBackend

class MyTokenBackend(AuthenticationBackend):
    async def authenticate(self, conn):
        return None

async def ticks():
    yield "data: tick\\n\\n"
"""

_INVALID = """\
priorityLevels:
  - name: batch
    type: Limited
    limited:
      nominalConcurrencyShares: 10
      lendablePercent: 190
"""


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("never called")


def _quickstart() -> str:
    """The README's FastAPI quickstart block, as printed."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    fastapi: list[str] = [block for block in blocks if block.startswith("# FastAPI")]
    assert len(fastapi) == 1, "the README has one FastAPI quickstart"
    return fastapi[0]


def _write_app(directory: Path) -> None:
    code = _quickstart()
    # Stubs go after the imports the block starts with (no code of the block is changed).
    (directory / "quickstart.py").write_text(_STUBS + code, encoding="utf-8")


def _run(directory: Path, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_quickstart_fails_at_import_with_a_missing_file(tmp_path: Path) -> None:
    _write_app(tmp_path)
    result = _run(tmp_path, "-c", "import quickstart")
    assert result.returncode != 0
    assert "ConfigError" in result.stderr
    assert "apf.yaml" in result.stderr


def test_the_quickstart_fails_at_import_with_field_paths(tmp_path: Path) -> None:
    _write_app(tmp_path)
    (tmp_path / "apf.yaml").write_text(_INVALID, encoding="utf-8")
    result = _run(tmp_path, "-c", "import quickstart")
    assert result.returncode != 0
    assert "ConfigError" in result.stderr
    assert "priorityLevels[batch].limited.lendablePercent" in result.stderr


def test_the_quickstart_imports_with_a_valid_file(tmp_path: Path) -> None:
    _write_app(tmp_path)
    (tmp_path / "apf.yaml").write_text("serverConcurrencyLimit: 10\n", encoding="utf-8")
    result = _run(tmp_path, "-c", "import quickstart; print(quickstart.limiter.config)")
    assert result.returncode == 0, result.stderr
    assert "server_concurrency_limit=10" in result.stdout


def test_uvicorn_refuses_to_start_the_quickstart_with_a_bad_file(tmp_path: Path) -> None:
    # Uvicorn's defaults (--lifespan auto): before, it logged "lifespan unsupported", then
    # "Application startup complete", and answered 500 to every request.
    _write_app(tmp_path)
    (tmp_path / "apf.yaml").write_text(_INVALID, encoding="utf-8")
    result = _run(tmp_path, "-m", "uvicorn", "quickstart:app", "--host", "127.0.0.1", "--port", "0")
    assert result.returncode != 0
    assert "priorityLevels[batch].limited.lendablePercent" in result.stderr
    assert "Application startup complete" not in result.stderr


@pytest.mark.parametrize(
    "config",
    [
        "missing-apf.yaml",
        {"priorityLevels": [{"name": "x", "type": "Limited", "limited": {"lendablePercent": 190}}]},
    ],
)
def test_the_middleware_loads_its_configuration_in_its_constructor(
    config: str | dict[str, object], tmp_path: Path
) -> None:
    source = str(tmp_path / config) if isinstance(config, str) else config
    with pytest.raises(ConfigError) as raised:
        APFMiddleware(_app, config=source)
    assert raised.value.problems
