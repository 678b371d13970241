"""The middleware's hooks and options: identity, resources, work estimates, routes, responses."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, SimpleUser, UnauthenticatedUser
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from apf_limiter import Admission, Limiter, Rejected, RequestDigest
from apf_limiter.asgi import (
    APFMiddleware,
    Identity,
    ResourceAttributes,
    RouteOptions,
    WorkEstimate,
    route_options,
    route_path,
)
from apf_limiter.asgi._types import ASGIApp, Receive, Scope, Send
from apf_limiter.testing import FakeClock
from tests.asgi.apps import level_config
from tests.asgi.driver import Driver, http_scope, ok_app

pytestmark = pytest.mark.timeout(60)

EVERYONE = [{"kind": "Group", "group": {"name": "*"}}]
ALL_URLS = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def _schema(name: str, precedence: int, distinguisher: str, rule: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "priorityLevelConfiguration": {"name": "test"},
        "matchingPrecedence": precedence,
        "distinguisherMethod": {"type": distinguisher},
        "rules": [rule],
    }


def _config() -> dict[str, Any]:
    config = level_config(limit=40)
    config["flowSchemas"] = [
        _schema(
            "tenants",
            10,
            "ByNamespace",
            {
                "subjects": EVERYONE,
                "resourceRules": [
                    {
                        "verbs": ["list", "get"],
                        "apiGroups": [""],
                        "resources": ["reports"],
                        "namespaces": ["*"],
                    }
                ],
            },
        ),
        _schema(
            "by-tenant-header",
            15,
            "ByHeader",
            {
                "subjects": EVERYONE,
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/tenant"]}],
            },
        ),
        _schema(
            "admins",
            20,
            "ByUser",
            {
                "subjects": [{"kind": "Group", "group": {"name": "admins"}}],
                "nonResourceRules": ALL_URLS,
            },
        ),
        _schema(
            "authenticated",
            30,
            "ByUser",
            {
                "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                "nonResourceRules": ALL_URLS,
            },
        ),
        _schema(
            "anonymous",
            40,
            "ByClientIP",
            {
                "subjects": [{"kind": "User", "user": {"name": "system:anonymous"}}],
                "nonResourceRules": ALL_URLS,
            },
        ),
    ]
    config["flowSchemas"][1]["distinguisherMethod"]["header"] = "x-tenant"
    return config


async def _admit(scope: Scope, app: ASGIApp | None = None, **options: Any) -> Admission:
    """Run one request through a middleware; return the admission the app saw."""
    seen: list[Admission] = []

    async def record(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["state"]["apf"])
        await (app or ok_app)(scope, receive, send)

    options.setdefault("limiter", Limiter(_config(), clock=FakeClock()))
    driver = Driver()
    await APFMiddleware(record, **options)(scope, driver.receive, driver.send)
    (admission,) = seen
    return admission


async def test_default_identity_comes_from_starlette_authentication() -> None:
    scope = http_scope("/x", user=SimpleUser("alice"), auth=AuthCredentials(["admins"]))
    admission = await _admit(scope)
    assert (admission.flow_schema, admission.distinguisher) == ("admins", "alice")
    assert admission.digest.groups == ("admins", "system:authenticated")
    authenticated = await _admit(http_scope("/x", user=SimpleUser("bob"), auth=AuthCredentials()))
    assert (authenticated.flow_schema, authenticated.distinguisher) == ("authenticated", "bob")


@pytest.mark.parametrize(
    "extra",
    [{}, {"user": UnauthenticatedUser(), "auth": AuthCredentials()}],
    ids=["none", "unauth"],
)
async def test_request_without_user_is_anonymous_fair_per_client_address(
    extra: dict[str, Any],
) -> None:
    admission = await _admit(http_scope("/x", **extra))
    assert admission.digest.user == "system:anonymous"
    assert admission.digest.groups == ("system:unauthenticated",)
    assert (admission.flow_schema, admission.distinguisher) == ("anonymous", "10.0.0.7")


async def test_identify_hook_may_be_sync_or_async() -> None:
    def sync(scope: Scope) -> Identity:
        return Identity("carol", ("admins",))

    async def asynchronous(scope: Scope) -> Identity | None:
        return None

    admission = await _admit(http_scope("/x"), identify=sync)
    assert (admission.flow_schema, admission.distinguisher) == ("admins", "carol")
    anonymous = await _admit(http_scope("/x", user=SimpleUser("x")), identify=asynchronous)
    assert anonymous.flow_schema == "anonymous"


async def test_resolve_hook_makes_a_resource_request_with_the_tenant_as_namespace() -> None:
    def tenant(scope: Scope) -> ResourceAttributes | None:
        parts = scope["path"].strip("/").split("/")
        if len(parts) >= 3 and parts[0] == "tenants" and parts[2] == "reports":
            name = parts[3] if len(parts) > 3 else ""
            return ResourceAttributes("reports", namespace=parts[1], name=name)
        return None

    listing = await _admit(http_scope("/tenants/acme/reports"), resolve=tenant)
    assert (listing.flow_schema, listing.distinguisher) == ("tenants", "acme")
    assert (listing.digest.verb, listing.digest.namespace) == ("list", "acme")
    one = await _admit(http_scope("/tenants/acme/reports/7"), resolve=tenant)
    assert (one.digest.verb, one.digest.name, one.flow_schema) == ("get", "7", "tenants")
    created = await _admit(http_scope("/tenants/acme/reports", method="POST"), resolve=tenant)
    # Only "tenants" has resource rules, and it does not cover create: catch-all takes it.
    assert (created.digest.verb, created.flow_schema) == ("create", "catch-all")
    plain = await _admit(http_scope("/elsewhere"), resolve=tenant)
    assert not plain.digest.is_resource_request


async def test_by_header_distinguisher_reads_the_request_header() -> None:
    scope = http_scope("/tenant", headers=[(b"x-tenant", b"blue"), (b"accept", b"*/*")])
    admission = await _admit(scope)
    assert (admission.flow_schema, admission.distinguisher) == ("by-tenant-header", "blue")


async def test_path_is_the_route_path_without_root_path() -> None:
    scope = http_scope("/api/tenant", root_path="/api", headers=[(b"x-tenant", b"g")])
    assert route_path(scope) == "/tenant"
    assert (await _admit(scope)).flow_schema == "by-tenant-header"


@pytest.mark.parametrize(
    ("estimate", "seats"),
    [(lambda s: 3, 3), (lambda s: WorkEstimate(seats=100), 6), (lambda s: None, 1)],
)
async def test_estimate_hook_sets_seats_clamped_to_max_seats(estimate: Any, seats: int) -> None:
    # limit 40, hand size 6: maxSeats = min(ceil(0.15 * 40), 40 // 6) = 6
    assert (await _admit(http_scope("/x"), estimate=estimate)).seats == seats


async def test_final_seats_are_held_for_the_additional_latency() -> None:
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    estimate = WorkEstimate(seats=2, final_seats=3, additional_latency=5.0)
    admission = await _admit(http_scope("/x"), limiter=limiter, estimate=lambda s: estimate)
    assert (admission.seats, admission.final_seats, admission.additional_latency) == (2, 3, 5.0)
    assert limiter.statistics().executing_seats == 3
    await clock.advance(5.0)
    assert limiter.statistics().executing_seats == 0


async def test_a_route_latency_alone_holds_the_seat() -> None:
    # An additional latency without final seats still holds the request's seat (Kubernetes
    # holds MaxSeats for it), from route settings as from an estimate hook.
    clock = FakeClock()
    limiter = Limiter(_config(), clock=clock)
    paths = {"/x": RouteOptions(additional_latency=2.0)}
    admission = await _admit(http_scope("/x"), limiter=limiter, paths=paths)
    assert (admission.seats, admission.final_seats, admission.additional_latency) == (1, 0, 2.0)
    assert limiter.statistics().executing_seats == 1
    await clock.advance(2.0)
    assert limiter.statistics().executing_seats == 0
    assert RouteOptions(final_seats=2).estimate is None  # final seats need a latency


def _starlette(endpoint_options: dict[str, Any]) -> Starlette:
    @route_options(**endpoint_options)
    async def marked(request: Request) -> Response:
        return PlainTextResponse("marked")

    async def plain(request: Request) -> Response:
        return PlainTextResponse("plain")

    inner = Starlette(routes=[Route("/deep", marked)])
    return Starlette(
        routes=[
            Route("/marked", marked, methods=["GET"]),
            Route("/plain", plain),
            Mount("/sub", routes=[Mount("/app", app=inner)]),
        ]
    )


@pytest.mark.parametrize(
    ("path", "seats"), [("/marked", 4), ("/sub/app/deep", 4), ("/plain", 1), ("/missing", 1)]
)
async def test_route_options_on_starlette_endpoints_including_mounts(path: str, seats: int) -> None:
    app = _starlette({"seats": 4})
    admission = await _admit(http_scope(path, app=app))
    assert admission.seats == seats


class _Recording:
    """A middleware between APF and the app that records the admission it sees."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[Admission] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope["state"]["apf"])
        await self.app(scope, receive, send)


@pytest.mark.parametrize(("path", "seats"), [("/marked", 4), ("/sub/app/deep", 4), ("/plain", 1)])
async def test_route_options_when_the_middleware_wraps_the_app_directly(
    path: str, seats: int
) -> None:
    # APFMiddleware(app) rather than app.add_middleware(): no scope["app"] names the routes, so
    # the middleware finds them on the app it wraps (through the middleware in between).
    recording = _Recording(_starlette({"seats": 4}))
    middleware = APFMiddleware(recording, limiter=Limiter(_config(), clock=FakeClock()))
    driver = Driver()
    await middleware(http_scope(path), driver.receive, driver.send)
    (admission,) = recording.seen
    assert admission.seats == seats


@pytest.mark.parametrize(
    ("path", "seats"),
    [("/api/v1/items", 4), ("/api/v1/nested/deep", 3), ("/api/v1/plain", 1), ("/direct", 2)],
)
async def test_route_options_on_fastapi_routers_with_prefixes(path: str, seats: int) -> None:
    from fastapi import APIRouter, FastAPI

    inner = APIRouter(prefix="/nested")

    @inner.get("/deep")
    @route_options(seats=3)
    async def deep() -> str:
        return "deep"

    router = APIRouter(prefix="/v1")

    @router.get("/items")
    @route_options(seats=4)
    async def items() -> str:
        return "items"

    @router.get("/plain")
    async def plain() -> str:
        return "plain"

    router.include_router(inner)
    app = FastAPI()
    app.include_router(router, prefix="/api")

    @app.get("/direct")
    @route_options(seats=2)
    async def direct() -> str:
        return "direct"

    admission = await _admit(http_scope(path, app=app))
    assert admission.seats == seats


async def test_route_marked_long_running_and_paths_mapping() -> None:
    limiter = Limiter(_config(), clock=FakeClock())
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(limiter.statistics().executing_requests)
        await send({"type": "http.response.body", "body": b""})

    starlette = _starlette({"long_running": True})
    await _admit(http_scope("/marked", app=starlette), app, limiter=limiter)
    await _admit(http_scope("/plain", app=starlette), app, limiter=limiter)
    paths = {
        "/feeds": RouteOptions(long_running=True),
        "/feeds/big": RouteOptions(seats=5),
        "*": RouteOptions(seats=2),
    }
    feed = await _admit(http_scope("/feeds/x"), app, limiter=limiter, paths=paths)
    big = await _admit(http_scope("/feeds/big/1"), app, limiter=limiter, paths=paths)
    other = await _admit(http_scope("/other"), app, limiter=limiter, paths=paths)
    assert seen == [0, 1, 0, 1, 1]
    assert (feed.seats, big.seats, other.seats) == (1, 5, 2)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="seats"):
        route_options(seats=0)
    with pytest.raises(ValueError, match="additional_latency"):
        WorkEstimate(final_seats=1, additional_latency=-1)
    with pytest.raises(ValueError, match="not both"):
        APFMiddleware(ok_app, limiter=Limiter(), config={})
    with pytest.raises(ValueError, match="must be '\\*' or start with '/'"):
        APFMiddleware(ok_app, paths={"feeds": RouteOptions()})
    with pytest.raises(ValueError, match="header name"):
        APFMiddleware(ok_app, flow_schema_header="bad name")
    for wait_limit in (-1, 61, float("nan")):
        with pytest.raises(ValueError, match="wait_limit must be between 0 and 60"):
            APFMiddleware(ok_app, wait_limit=wait_limit)
    APFMiddleware(ok_app, wait_limit=60)
    with pytest.raises(ValueError, match="non-empty"):
        Identity("")


async def _rejected(**options: Any) -> Driver:
    limiter = Limiter(level_config(limit=1, reject=True), clock=FakeClock())
    held = limiter.admit(RequestDigest())
    await held.__aenter__()
    driver = Driver()
    await APFMiddleware(ok_app, limiter=limiter, **options)(
        http_scope("/x"), driver.receive, driver.send
    )
    await held.__aexit__(None, None, None)
    return driver


async def test_header_names_are_configurable_and_can_be_turned_off() -> None:
    renamed = (await _rejected(flow_schema_header="X-FS", priority_level_header=None)).start()
    assert renamed["headers"]["x-fs"] == "everyone"
    assert "x-apf-priority-level" not in renamed["headers"]
    off = (await _rejected(response_headers=False)).start()
    assert not any(name.startswith("x-apf") for name in off["headers"])
    assert off["headers"]["retry-after"] == "1"
    executed = Driver()
    await APFMiddleware(ok_app, limiter=Limiter(_config()), response_headers=False)(
        http_scope("/x"), executed.receive, executed.send
    )
    assert executed.start()["headers"] == {}


async def test_on_reject_hook_builds_the_response_and_gets_retry_after_and_headers() -> None:
    reasons: list[str] = []

    async def busy(scope: Scope, rejected: Rejected) -> ASGIApp:
        reasons.append(rejected.reason)
        return PlainTextResponse("busy", status_code=503, headers={"Retry-After": "9"})

    driver = await _rejected(on_reject=busy)
    start = driver.start()
    assert start["status"] == 503
    assert start["headers"]["retry-after"] == "9"  # the hook's own value is kept
    assert start["headers"]["x-apf-flow-schema"] == "everyone"
    assert driver.sent[-1]["body"] == b"busy"
    assert reasons == ["concurrency-limit"]
    default = (await _rejected(on_reject=lambda s, r: PlainTextResponse("x", 429))).start()
    assert default["headers"]["retry-after"] == "1"


async def test_hooks_returning_the_wrong_type_fail_loudly() -> None:
    wrong: Any = lambda scope: "alice"  # noqa: E731
    with pytest.raises(TypeError, match="identify"):
        await _admit(http_scope("/x"), identify=wrong)
    with pytest.raises(TypeError, match="resolve"):
        await _admit(http_scope("/x"), resolve=wrong)
    with pytest.raises(TypeError, match="estimate"):
        await _admit(http_scope("/x"), estimate=wrong)
    with pytest.raises(TypeError, match="estimate"):
        await _admit(http_scope("/x"), estimate=lambda scope: True)  # a bool is not a seat count
    with pytest.raises(TypeError, match="long_running"):
        await _admit(http_scope("/x"), long_running=wrong)
    with pytest.raises(TypeError, match="long_running"):
        await _admit(http_scope("/x"), long_running=lambda scope: 0)
