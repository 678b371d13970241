"""The middleware's per-request work is proportional to what the request needs.

While no endpoint in the process is marked with ``route_options`` and no ``paths=`` pattern is
given, no route lookup runs (the application's routes are not even read); the classification
is the one the full lookup would give. An endpoint marked later is found from then on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.authentication import SimpleUser, UnauthenticatedUser
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, RouteOptions, route_options
from apf_limiter.asgi._classify import ScopeClassifier
from apf_limiter.asgi._identity import default_identify, remove_dot_segments, route_path
from apf_limiter.asgi._routes import RouteLookup
from apf_limiter.asgi._types import Receive, Scope, Send
from apf_limiter.gate import MARKED_ENDPOINTS
from apf_limiter.testing import FakeClock
from tests.asgi.driver import Driver, http_scope, websocket_scope

pytestmark = pytest.mark.timeout(60)


class _CountingRoutes:
    """An application whose ``routes`` attribute counts its reads (a route lookup reads it)."""

    def __init__(self, routes: list[Any]) -> None:
        self._routes = routes
        self.reads = 0

    @property
    def routes(self) -> list[Any]:
        self.reads += 1
        return self._routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("not called")


async def _plain(request: Request) -> Response:
    return PlainTextResponse("plain")


@pytest.fixture
def nothing_marked() -> Iterator[None]:
    """A process where no endpoint is marked (other tests' modules mark some at import)."""
    counter = MARKED_ENDPOINTS
    marked = counter[0]
    counter[0] = 0
    yield
    counter[0] = marked


def _classifier(app: object, paths: dict[str, RouteOptions] | None = None) -> ScopeClassifier:
    return ScopeClassifier(default_identify, None, None, None, RouteLookup(paths, app))


def _scopes(app: object) -> list[Scope]:
    return [
        http_scope("/", app=app),
        http_scope("/a/./b/../c", app=app),
        {**http_scope("/prefix/x", app=app), "root_path": "/prefix"},
        {**http_scope("/items", app=app), "method": "DELETE"},
        websocket_scope("/ws", app=app),
    ]


@pytest.mark.usefixtures("nothing_marked")
def test_nothing_marked_reads_no_routes_and_classifies_as_the_full_lookup() -> None:
    app = _CountingRoutes([Route("/", _plain)])
    assert not RouteLookup(None, app).patterns
    fast = _classifier(app)
    for scope in _scopes(app):
        classified = fast.classify(scope)
        assert isinstance(classified, tuple)
        digest, long_running, timeout, source = classified
        # The full path, as it runs once something is marked: the same answer.
        full = fast._classified(scope, None, None, None, None)
        assert (digest, long_running, timeout, source) == full
        assert long_running is (scope["type"] == "websocket")
    full_lookups = app.reads
    assert full_lookups >= len(_scopes(app))  # the full lookup reads the routes...
    for scope in _scopes(app):
        fast.classify(scope)
    assert app.reads == full_lookups  # ...the fast one never does


@pytest.mark.usefixtures("nothing_marked")
def test_path_patterns_are_looked_up_even_with_nothing_marked() -> None:
    app = _CountingRoutes([])
    assert RouteLookup({"/reports": RouteOptions(seats=3)}, app).patterns
    classifier = _classifier(app, {"/reports": RouteOptions(seats=3)})
    classified = classifier.classify(http_scope("/reports/x", app=app))
    assert isinstance(classified, tuple)
    assert classified[0].seats == 3


@pytest.mark.usefixtures("nothing_marked")
async def test_an_endpoint_marked_after_the_middleware_was_built_is_found() -> None:
    async def export(request: Request) -> Response:
        return PlainTextResponse("export")

    app = Starlette(routes=[Route("/export", export), Route("/plain", _plain)])
    middleware = APFMiddleware(app)
    classify = middleware._classify
    before = classify(http_scope("/export", app=app))
    assert isinstance(before, tuple)
    assert before[0].seats is None
    route_options(seats=5)(export)  # marked now: the counter says a lookup may find it
    assert MARKED_ENDPOINTS[0] == 1
    after = classify(http_scope("/export", app=app))
    assert isinstance(after, tuple)
    assert after[0].seats == 5
    assert after[3] is export  # where the estimate came from: the marked endpoint
    plain = classify(http_scope("/plain", app=app))
    assert isinstance(plain, tuple)
    assert plain[0].seats is None
    middleware.limiter.close()


@pytest.mark.usefixtures("nothing_marked")
def test_the_fast_digest_path_is_the_route_path_without_dot_segments() -> None:
    app = _CountingRoutes([])
    fast = _classifier(app)
    for scope in _scopes(app):
        classified = fast.classify(scope)
        assert isinstance(classified, tuple)
        assert classified[0].path == remove_dot_segments(route_path(scope))


@pytest.mark.parametrize(
    "user", [None, UnauthenticatedUser(), "absent"], ids=["None", "unauthenticated", "absent"]
)
def test_requests_without_an_authenticated_user_are_anonymous(user: object) -> None:
    scope = http_scope("/x")
    if user != "absent":
        scope["user"] = user
    classified = _classifier(_CountingRoutes([])).classify(scope)
    assert isinstance(classified, tuple)
    assert (classified[0].user, classified[0].groups) == (
        "system:anonymous",
        ("system:unauthenticated",),
    )
    authenticated = {**scope, "user": SimpleUser("alice")}
    classified = _classifier(_CountingRoutes([])).classify(authenticated)
    assert isinstance(classified, tuple)
    assert classified[0].user == "alice"


@pytest.mark.parametrize("message_type", ["http.response.zerocopysend", "http.response.pathsend"])
async def test_the_seats_come_back_at_the_last_zerocopysend_or_pathsend(message_type: str) -> None:
    limiter = Limiter(clock=FakeClock())
    seats: list[int] = []

    def held() -> None:
        seats.append(limiter.statistics().executing_seats)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        held()  # 1: held until the response's last message
        if message_type == "http.response.pathsend":
            await send({"type": message_type, "path": "/dev/null"})
        else:
            await send({"type": message_type, "file": None, "more_body": True})
            held()  # 1: more to come
            await send({"type": message_type, "file": None, "more_body": False})
        held()  # 0: given back with the last message, before the app returns

    driver = Driver({"type": "http.request", "body": b"", "more_body": False})
    await APFMiddleware(app, limiter=limiter)(http_scope("/file"), driver.receive, driver.send)
    expected = [1, 0] if message_type == "http.response.pathsend" else [1, 1, 0]
    assert seats == expected
    assert [m["type"] for m in driver.sent][-1] == message_type
    limiter.close()
