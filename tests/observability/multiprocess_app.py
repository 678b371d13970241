"""A tiny app for ``test_multiprocess.py``, served by ``uvicorn --workers 2``.

Each worker imports it: its own limiter and metrics, with ``PROMETHEUS_MULTIPROC_DIR`` set by
the test. Responses say which worker answered (the body of ``/work``, the ``x-worker-pid``
header of ``/metrics``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware
from apf_limiter.observability import PrometheusMetrics, metrics_app
from apf_limiter.observability._asgi import Receive, Scope, Send

PID = str(os.getpid()).encode()

metrics = PrometheusMetrics(CollectorRegistry())
limiter = Limiter(observer=metrics)
metrics.bind(limiter)
scrape = metrics_app()


async def _inner(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/metrics":

        async def tagged(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"x-worker-pid", PID)]
                message = {**message, "headers": headers}
            await send(message)

        await scrape(scope, receive, tagged)
        return
    await asyncio.sleep(0.05)  # long enough for concurrent connections to reach both workers
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": PID})


app = APFMiddleware(_inner, limiter=limiter)
