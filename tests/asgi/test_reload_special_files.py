"""Under a real server (uvicorn): a named pipe put at the configuration path neither blocks the
reload nor keeps a later valid file from being applied, and ``close()`` returns at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from tests.asgi.driver import ok_app
from tests.asgi.server import serve
from tests.helpers import single_level_config


def _write(path: Path, limit: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(single_level_config(limit=limit)))
    os.replace(temporary, path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
async def test_a_named_pipe_at_the_path_does_not_stop_the_reload(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    limiter = Limiter.from_file(path, reload=True, reload_interval=0.05)
    app = APFMiddleware(ok_app, limiter=limiter)
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    keep = tmp_path / "keep"
    os.link(pipe, keep)  # the pipe by another name: to release a worker stuck on it
    try:
        async with (
            serve(app, lifespan="off") as base_url,
            httpx.AsyncClient(base_url=base_url) as client,
        ):
            os.replace(pipe, path)
            # Checks fall due inside these requests: a few intervals with the pipe in place.
            for _ in range(10):
                assert (await client.get("/")).status_code == 200
                await asyncio.sleep(0.03)
            _write(path, 7)
            deadline = time.monotonic() + 5
            while limiter.config.server_concurrency_limit != 7:
                assert time.monotonic() < deadline, "the valid file was never applied"
                assert (await client.get("/")).status_code == 200
                await asyncio.sleep(0.02)
        started = time.monotonic()
        limiter.close()
        assert time.monotonic() - started < 2
    finally:
        # A broken build's worker waits in open() for a writer, for good: be that writer.
        # (OSError: nobody reads it, so nothing is stuck.)
        with contextlib.suppress(OSError):
            os.close(os.open(keep, os.O_WRONLY | os.O_NONBLOCK))
