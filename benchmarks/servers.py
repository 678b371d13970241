"""Run a benchmark app under uvicorn in a child process, on a free 127.0.0.1 port.

``python -m uvicorn --host 127.0.0.1 --port N`` with a port the OS just reported free (tried
again with another port if it was taken in between). Not ``--fd``: uvicorn wraps an inherited
descriptor as an ``AF_UNIX`` socket, so asyncio never sets ``TCP_NODELAY`` on the accepted TCP
connections, and every response then stalls on Nagle's algorithm and the client's delayed ACK
(~40 ms on Linux): the server idles and the benchmark measures the stall.

The child inherits the environment (``PYTHONPATH`` included: it imports the same apf_limiter
build as the parent) and runs from the repository root. Every variant of a comparison gets the
same loop and HTTP implementation (:func:`uvicorn_impl`), one worker and no access log.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "Server",
    "compiled_overlay",
    "compiled_tree",
    "fetch_json",
    "running_server",
    "uvicorn_impl",
    "REPO_ROOT",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
_START_TIMEOUT = 20.0
_PORT_ATTEMPTS = 5


def uvicorn_impl() -> tuple[str, str]:
    """The event loop and HTTP implementation uvicorn's ``auto`` would pick here."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    protocol = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return loop, protocol


@dataclass(frozen=True, slots=True)
class Server:
    """A running benchmark server.

    Attributes:
        name: The variant's name.
        host: ``127.0.0.1``.
        port: Its port.
        pid: The server process id (uvicorn runs the app in this process).
        info: What ``/_bench/info`` answered (build, Python, uvicorn, event loop).
    """

    name: str
    host: str
    port: int
    pid: int
    info: dict[str, Any]

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8000``."""
        return f"http://{self.host}:{self.port}"


def fetch_json(host: str, port: int, path: str, timeout: float = 5.0) -> dict[str, Any]:
    """``GET path`` and decode the JSON answer (for ``/_bench/*``)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status}")
        result: dict[str, Any] = json.loads(body)
        return result
    finally:
        connection.close()


@contextmanager
def running_server(
    name: str,
    factory: str,
    *,
    uvicorn_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    loop: str | None = None,
    http: str | None = None,
    log_level: str = "warning",
    cwd: Path | None = None,
) -> Iterator[Server]:
    """Start ``benchmarks.bench_app:<factory>`` under uvicorn; stop it when the block ends.

    Args:
        name: The variant's name (for messages).
        factory: An application factory of :mod:`benchmarks.bench_app`, or ``module:factory``.
        uvicorn_args: Extra uvicorn options, e.g. ``["--limit-concurrency", "600"]``.
        env: Extra environment variables for the child (added to this process's environment).
        loop: uvicorn's ``--loop`` (default: :func:`uvicorn_impl`).
        http: uvicorn's ``--http`` (default: :func:`uvicorn_impl`).
        log_level: uvicorn's ``--log-level``.
        cwd: The child's working directory (default: the repository root). ``python -m`` puts
            it first on the path, so it decides which apf_limiter the server imports.

    Raises:
        RuntimeError: If the server exits early or does not answer within 20 seconds.
    """
    default_loop, default_http = uvicorn_impl()
    child_env = {**os.environ, **(env or {})}
    for attempt in range(_PORT_ATTEMPTS):
        port = _free_port()
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            factory if ":" in factory else f"benchmarks.bench_app:{factory}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--loop",
            loop or default_loop,
            "--http",
            http or default_http,
            "--no-access-log",
            "--log-level",
            log_level,
            "--backlog",
            "2048",
            "--timeout-graceful-shutdown",
            "2",
            *uvicorn_args,
        ]
        with tempfile.TemporaryFile() as log:
            process = subprocess.Popen(
                command, cwd=cwd or REPO_ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT
            )
            try:
                try:
                    info = _wait_ready(port, process, log)
                except _PortTaken:
                    if attempt + 1 < _PORT_ATTEMPTS:
                        continue
                    raise RuntimeError("no free port found for the benchmark server") from None
                yield Server(name, "127.0.0.1", port, process.pid, info)
                return
            finally:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class _PortTaken(Exception):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_ready(port: int, process: subprocess.Popen[bytes], log: IO[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if process.poll() is not None:
            output = _read(log)
            if "address already in use" in output.lower():
                raise _PortTaken
            raise RuntimeError(f"the benchmark server exited early:\n{output}")
        try:
            return fetch_json("127.0.0.1", port, "/_bench/info", timeout=2.0)
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the benchmark server did not start:\n{_read(log)}")
        time.sleep(0.05)


def _read(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode("utf-8", "replace")[-4000:]


def compiled_tree(path: Path) -> str | None:
    """Why ``path`` is no usable compiled tree, or ``None`` if it is one."""
    if not list((path / "apf_limiter" / "engine").glob("_queueset*.so")):
        return f"no compiled tree at {path} (`make compile` makes one): apf-compiled skipped"
    return None


@contextmanager
def compiled_overlay(compiled: Path) -> Iterator[Path]:
    """A working directory for children that run the compiled tree ``compiled`` (``make compile``).

    Its ``apf_limiter`` (and mypyc's shared library) are the compiled tree's, its
    ``benchmarks`` this one's: ``python -m`` puts the working directory first on the path.
    Removed when the block ends.
    """
    with tempfile.TemporaryDirectory(prefix="apf-peers-") as tmp:
        root = Path(tmp)
        for entry in [compiled / "apf_limiter", *compiled.glob("*.so")]:
            (root / entry.name).symlink_to(entry.resolve())
        (root / "benchmarks").symlink_to(Path(__file__).resolve().parent)
        yield root
