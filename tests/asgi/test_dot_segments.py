"""Dot segments cannot walk a request into an exempt flow schema (``/healthz/../../api/x``)."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, build_digest
from apf_limiter.asgi._identity import remove_dot_segments
from tests.asgi.server import serve


def _rfc3986_remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, step by step on an input and an output buffer (the oracle)."""
    source, output = path, ""
    while source:
        if source.startswith("../"):
            source = source[3:]
        elif source.startswith("./"):
            source = source[2:]
        elif source.startswith("/./") or source == "/.":
            source = "/" + source[3:]
        elif source.startswith("/../") or source == "/..":
            source = "/" + source[4:]
            output = output[: max(output.rfind("/"), 0)]
        elif source in (".", ".."):
            source = ""
        else:
            end = source.find("/", 1 if source.startswith("/") else 0)
            end = len(source) if end < 0 else end
            output, source = output + source[:end], source[end:]
    return output


def test_agrees_with_rfc_3986_on_every_short_path() -> None:
    checked = 0
    for length in range(0, 9):
        for chars in itertools.product("a./", repeat=length):
            path = "/" + "".join(chars)
            assert remove_dot_segments(path) == _rfc3986_remove_dot_segments(path), path
            checked += 1
    assert checked == sum(3**n for n in range(9))


def test_the_common_path_is_returned_as_it_is() -> None:
    path = "/static/app.js"
    assert remove_dot_segments(path) is path


def _scope(path: str) -> dict[str, object]:
    return {"type": "http", "method": "GET", "path": path, "headers": [], "client": None}


async def test_classification_sees_the_path_without_dot_segments() -> None:
    limiter = Limiter()  # the built-in configuration: GET /healthz/* is exempt ("probes")

    def schema_of(path: str) -> str:
        digest = build_digest(_scope(path), None, None, None)
        admission = limiter.admit(digest)
        assert admission.start()
        admission.release()
        return admission.flow_schema

    assert build_digest(_scope("/healthz/../../api/x"), None, None, None).path == "/api/x"
    assert schema_of("/healthz/../../api/x") == "anonymous"
    assert schema_of("/healthz/live") == "probes"


async def _raw_get(base_url: str, target: str) -> tuple[int, str]:
    """GET ``target`` byte for byte (HTTP clients normalize dot segments away themselves)."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    response = (await reader.read()).decode("latin-1")
    writer.close()
    status = int(response.split(" ", 2)[1])
    schema = ""
    for line in response.split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "x-apf-flow-schema":
            schema = value.strip()
    return status, schema


@pytest.mark.parametrize(
    "target",
    [
        "/healthz/../../api/x",
        "/healthz/%2e%2e/%2e%2e/api/x",
        "/healthz/%2E%2E/api/x",
        "/healthz/..%2f..%2fapi/x",
        "/healthz/.%2e/api/x",
        "/readyz/./../api/x",
    ],
)
async def test_a_real_server_classifies_walked_paths_as_what_they_reach(target: str) -> None:
    async def anything(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.url.path)

    app = Starlette(routes=[Route("/{rest:path}", anything)])
    app.add_middleware(APFMiddleware)
    async with serve(app) as base_url:
        assert await _raw_get(base_url, "/healthz/live") == (200, "probes")
        assert await _raw_get(base_url, target) == (200, "anonymous")
