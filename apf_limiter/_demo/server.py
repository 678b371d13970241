"""Run the demo application under uvicorn in a child process, on an inherited socket.

The parent binds a free 127.0.0.1 port and hands the listening socket to the child, so there
is no race for the port; :func:`running_server` waits until ``/healthz`` answers. Run as
``python -m apf_limiter._demo.server --mode apf --fd N --capacity 8 --service-time 0.1``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import IO

from apf_limiter._demo.app import Mode, create_app
from apf_limiter._demo.client import Connection, encode_get

_START_TIMEOUT = 15.0


@asynccontextmanager
async def running_server(mode: Mode, *, capacity: int, service_time: float) -> AsyncIterator[str]:
    """Start the demo server in a child process; yields its base URL until the block ends.

    Raises:
        RuntimeError: If the server does not answer within 15 seconds.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    port = listener.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "apf_limiter._demo.server",
        f"--mode={mode}",
        f"--fd={listener.fileno()}",
        f"--capacity={capacity}",
        f"--service-time={service_time}",
    ]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, pass_fds=(listener.fileno(),), stdout=log, stderr=subprocess.STDOUT
        )
        listener.close()  # the child has its own copy
        url = f"http://127.0.0.1:{port}"
        try:
            await _wait_ready(port, process, log)
            yield url
        finally:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)


async def _wait_ready(port: int, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _START_TIMEOUT
    health = Connection("127.0.0.1", port, encode_get("127.0.0.1", port, "/healthz", {}))
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the demo server exited early:\n{_read(log)}")
            try:
                async with asyncio.timeout(2.0):
                    if (await health.get()).status == 200:
                        return
            except (OSError, TimeoutError):
                pass
            if loop.time() > deadline:
                raise RuntimeError(f"the demo server did not start:\n{_read(log)}")
            await asyncio.sleep(0.05)
    finally:
        health.close()


def _read(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode("utf-8", "replace")


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the demo application on the listening socket ``--fd`` until terminated."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m apf_limiter._demo.server")
    parser.add_argument("--mode", choices=("semaphore", "apf"), required=True)
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--capacity", type=int, required=True)
    parser.add_argument("--service-time", type=float, required=True)
    args = parser.parse_args(argv)
    app = create_app(args.mode, capacity=args.capacity, service_time=args.service_time)
    sock = socket.socket(fileno=args.fd)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
