"""examples/aiohttp_app.py on a real aiohttp server: it does what its docstring says."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest

from tests.aiohttp.server import serve

pytestmark = pytest.mark.timeout(60)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aiohttp_app.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("apf_example_aiohttp_app", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_the_aiohttp_example_classifies_streams_and_exempts_probes() -> None:
    app = _load().make_app()
    async with serve(app, handler_cancellation=True) as url, aiohttp.ClientSession(url) as client:
        async with client.get("/") as response:
            assert response.status == 200
            assert response.headers["X-APF-Flow-Schema"] == "anonymous"
        async with client.get("/slow?seconds=0", headers={"x-user": "alice"}) as response:
            assert response.status == 200
            assert response.headers["X-APF-Flow-Schema"] == "global-default"
        async with client.get("/events?ticks=2") as response:
            assert response.status == 200
            assert await response.read() == b"data: 0\n\ndata: 1\n\n"
        async with client.get("/healthz") as response:
            assert response.headers["X-APF-Priority-Level"] == "exempt"
        async with client.get("/slow?seconds=99") as response:
            assert response.status == 400
