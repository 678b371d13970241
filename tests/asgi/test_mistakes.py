"""Wiring mistakes the middleware can see are loud: one warning each, saying what to do."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    BaseUser,
    SimpleUser,
    UnauthenticatedUser,
)
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from apf_limiter import Limiter
from apf_limiter.asgi import APFMiddleware, Identity, RouteOptions, WorkEstimate, route_options
from apf_limiter.asgi._mistakes import CHECK_ALL, CHECK_EVERY
from apf_limiter.asgi._types import Scope
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app

pytestmark = pytest.mark.timeout(60)


def _warnings(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "apf_limiter"
        and record.levelno == logging.WARNING
        and getattr(record, "apf_warning", "").startswith(key)
    ]


async def _call(middleware: APFMiddleware, scope: Scope) -> Driver:
    driver = Driver({"type": "http.request", "body": b""})
    await middleware(scope, driver.receive, driver.send)
    return driver


# -- credentials but no scope["user"] ------------------------------------------------------


class _Tokens(AuthenticationBackend):
    """Bearer tokens: ``Bearer <name>`` is the user ``<name>``."""

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        header = conn.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            return None
        return AuthCredentials(["authenticated"]), SimpleUser(header.removeprefix("Bearer "))


async def _whoami(request: Request) -> Response:
    return JSONResponse({"user": request.state.apf.digest.user})


@pytest.mark.parametrize("apf_first", [True, False], ids=["apf-outside", "apf-inside"])
async def test_apf_outside_the_authentication_middleware_is_warned_about_once(
    apf_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    apf = Middleware(APFMiddleware, config=level_config(limit=4))
    auth = Middleware(AuthenticationMiddleware, backend=_Tokens())
    # Starlette(middleware=[...]) lists the outermost first.
    stack = [apf, auth] if apf_first else [auth, apf]
    app = Starlette(routes=[Route("/me", _whoami)], middleware=stack)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with caplog.at_level(logging.WARNING, logger="apf_limiter"):
            users = [
                (await client.get("/me", headers={"Authorization": "Bearer alice"})).json()
                for _ in range(3)
            ]
    warned = _warnings(caplog, "anonymous-with-credentials")
    if apf_first:
        assert users == [{"user": "system:anonymous"}] * 3
        assert len(warned) == 1
        assert "an Authorization header" in warned[0]
        assert "added LAST runs FIRST" in warned[0] and "identify=" in warned[0]
    else:
        assert users == [{"user": "alice"}] * 3
        assert warned == []


async def test_a_session_cookie_alone_is_not_taken_for_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Anonymous sessions (a cart, a CSRF token: Starlette's SessionMiddleware sets its cookie
    # for every visitor) send one on every request: no warning for them.
    middleware = APFMiddleware(ok_app, config=level_config(limit=4))
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        for _ in range(3):
            await _call(middleware, http_scope(headers=[(b"cookie", b"session=eyJjYXJ0Ijog")]))
        assert _warnings(caplog, "anonymous-with-credentials") == []
        await _call(middleware, http_scope(headers=[(b"authorization", b"Basic eDp5")]))
    (warned,) = _warnings(caplog, "anonymous-with-credentials")
    assert "an Authorization header" in warned


@pytest.mark.parametrize(
    ("options", "extra"),
    [
        ({"identify": lambda scope: None}, {}),  # an identify hook: its answer is the identity
        ({"identify": lambda scope: Identity("alice")}, {}),
        ({}, {"user": UnauthenticatedUser(), "auth": AuthCredentials()}),  # a bad token
        ({}, {"user": SimpleUser("alice"), "auth": AuthCredentials()}),
    ],
    ids=["hook-anonymous", "hook-user", "unauthenticated", "authenticated"],
)
async def test_no_warning_when_the_identity_is_known(
    options: dict[str, Any], extra: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    middleware = APFMiddleware(ok_app, config=level_config(limit=4), **options)
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        scope = http_scope(headers=[(b"authorization", b"Bearer x")], **extra)
        await _call(middleware, scope)
    assert _warnings(caplog, "anonymous-with-credentials") == []


async def test_once_a_user_was_seen_credentials_are_no_longer_looked_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The authentication middleware runs first: it sets a user on every request. A scope
    # without one later (a test calling the middleware directly, say) is not checked any more.
    middleware = APFMiddleware(ok_app, config=level_config(limit=4))
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        await _call(middleware, http_scope(user=UnauthenticatedUser(), auth=AuthCredentials()))
        await _call(middleware, http_scope(headers=[(b"authorization", b"Bearer x")]))
    assert _warnings(caplog, "anonymous-with-credentials") == []


# -- seats clamped to the level's maxSeats -------------------------------------------------


def _seats_app() -> Starlette:
    @route_options(seats=8)
    async def export(request: Request) -> Response:
        apf = request.state.apf
        return JSONResponse({"asked": apf.digest.seats, "seats": apf.seats})

    @route_options(seats=9)
    async def archive(request: Request) -> Response:
        return JSONResponse({"seats": request.state.apf.seats})

    @route_options(seats=6)
    async def fits(request: Request) -> Response:
        return JSONResponse({"seats": request.state.apf.seats})

    routes = [Route("/export", export), Route("/archive", archive), Route("/fits", fits)]
    return Starlette(routes=routes)


async def test_route_seats_clamped_by_max_seats_are_warned_about_once_per_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # limit 40, handSize 6: maxSeats = max(1, min(ceil(0.15 * 40), 40 // 6)) = 6.
    app = APFMiddleware(_seats_app(), config=level_config(limit=40))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with caplog.at_level(logging.WARNING, logger="apf_limiter"):
            answers = [(await client.get(path)).json() for path in ("/export",) * 3]
            await client.get("/archive")
            assert (await client.get("/fits")).json() == {"seats": 6}
    assert answers == [{"asked": 8, "seats": 6}] * 3  # what the admission shows
    export, archive = _warnings(caplog, "seats-clamped")
    assert "endpoint tests.asgi.test_mistakes._seats_app.<locals>.export" in export
    assert "8 seats" in export and "'test'" in export and "at most 6 (its maxSeats)" in export
    assert "(e.g. GET /export) get 6 seats" in export
    assert "apf-limiter show" in export and "handSize" in export
    assert "archive" in archive and "9 seats" in archive


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"paths": {"/reports": RouteOptions(seats=12)}}, "paths['/reports']"),
        ({"estimate": lambda scope: 12}, "the estimate= hook"),
        ({"estimate": lambda scope: WorkEstimate(12)}, "the estimate= hook"),
    ],
    ids=["paths", "hook-int", "hook-estimate"],
)
async def test_clamped_seats_name_their_source(
    options: dict[str, Any], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    middleware = APFMiddleware(ok_app, config=level_config(limit=40), **options)
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        for _ in range(2):
            await _call(middleware, http_scope("/reports/1"))
    (warned,) = _warnings(caplog, "seats-clamped")
    assert warned.startswith(named + " asks for 12 seats")
    assert "(e.g. GET /reports/1) get 6 seats" in warned


async def test_clamped_final_seats_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    heavy_later = RouteOptions(seats=2, final_seats=10, additional_latency=1.0)
    no_latency = RouteOptions(seats=2, final_seats=10)  # final seats mean nothing: not clamped
    middleware = APFMiddleware(
        ok_app, config=level_config(limit=40), paths={"/later": heavy_later, "/no": no_latency}
    )
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        await _call(middleware, http_scope("/no"))
        assert _warnings(caplog, "seats-clamped") == []
        await _call(middleware, http_scope("/later"))
    (warned,) = _warnings(caplog, "seats-clamped")
    assert "2 seats and 10 final seats" in warned and "at most 6 (its maxSeats)" in warned
    assert "get 2 seats and 6 final seats" in warned


async def test_clamping_is_warned_about_per_level(caplog: pytest.LogCaptureFixture) -> None:
    # The same route, classified by user into two levels with different maxSeats.
    config = level_config(limit=40)
    small = {**config["priorityLevels"][0], "name": "small"}
    small["limited"] = {**small["limited"], "nominalConcurrencyShares": 1}
    config["priorityLevels"].append(small)
    users = {
        "name": "bob",
        "priorityLevelConfiguration": {"name": "small"},
        "matchingPrecedence": 10,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [
            {
                "subjects": [{"kind": "User", "user": {"name": "bob"}}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }
        ],
    }
    config["flowSchemas"].append(users)

    def identify(scope: Scope) -> Identity:
        return Identity("bob" if scope["path"] == "/bob" else "alice")

    limiter = Limiter(config)
    middleware = APFMiddleware(ok_app, limiter=limiter, identify=identify, estimate=lambda scope: 8)
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        for path in ("/alice", "/bob", "/alice", "/bob"):
            await _call(middleware, http_scope(path))
    warned = _warnings(caplog, "seats-clamped")
    assert len(warned) == 2
    assert "'test'" in warned[0] and "'small'" in warned[1]
    assert "get 1 seat." in warned[1]


# -- debug endpoints without authorize -------------------------------------------------------


@pytest.mark.parametrize("authorized", [False, True])
def test_debug_endpoints_without_authorize_are_warned_about(
    authorized: bool, caplog: pytest.LogCaptureFixture
) -> None:
    options: dict[str, Any] = {"authorize": lambda scope: True} if authorized else {}
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        APFMiddleware(ok_app, config=level_config(limit=4), debug_endpoints=True, **options)
    warned = _warnings(caplog, "debug-no-authorize")
    if authorized:
        assert warned == []
    else:
        (message,) = warned
        assert "403 to every request" in message and "authorize=" in message


async def test_credentials_are_still_noticed_after_many_anonymous_requests(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Past the first CHECK_ALL anonymous requests only a sample is checked: a misplaced
    # middleware makes every credentialed request anonymous, so the sample finds one.
    middleware = APFMiddleware(ok_app, config=level_config(limit=4))
    with caplog.at_level(logging.WARNING, logger="apf_limiter"):
        for _ in range(CHECK_ALL + 5):
            await _call(middleware, http_scope())
        assert _warnings(caplog, "anonymous-with-credentials") == []
        for _ in range(CHECK_EVERY):
            await _call(middleware, http_scope(headers=[(b"authorization", b"Bearer x")]))
    assert len(_warnings(caplog, "anonymous-with-credentials")) == 1
