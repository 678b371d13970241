"""Under a real server (uvicorn) with no traffic at all, a changed configuration file is applied
(issue 28, item 3): the middleware's lifespan startup arms the limiter's timer in the server's
loop, and the timer runs the file's checks."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from apf_limiter.asgi._types import Receive, Scope, Send
from tests.asgi.driver import ok_app
from tests.asgi.server import serve, wait_until
from tests.helpers import single_level_config


def _write(path: Path, limit: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(single_level_config(limit=limit)))
    os.replace(temporary, path)


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """``ok_app``, with the lifespan protocol a real app (Starlette, FastAPI) speaks."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({"type": f"{message['type']}.complete"})
            if kind == "shutdown":
                return
    await ok_app(scope, receive, send)


async def test_a_server_with_no_traffic_applies_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "apf.json"
    _write(path, 2)
    # Built with no event loop running, as a module-level app is at import time.
    limiter = await asyncio.to_thread(Limiter.from_file, path, reload=True, reload_interval=0.1)
    app = APFMiddleware(_app, limiter=limiter)
    try:
        async with serve(app):
            _write(path, 9)
            # Two or three intervals; bounded well above that for a loaded machine.
            await wait_until(lambda: limiter.config.server_concurrency_limit == 9, timeout=10)
            level = limiter.statistics().priority_levels["test"]
            assert level.dispatched == 0  # not a single request was needed
    finally:
        limiter.close()
