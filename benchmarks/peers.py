"""Against the peers: a hello-world app bare, and behind each limiter, in the same run.

Run: ``.venv/bin/python -m benchmarks.peers`` (``--quick`` for a smoke test, ~40 s).

The variants, the same hello-world Starlette app (``GET /``) in each:

* ``bare`` — the app alone;
* ``semaphore`` — behind a semaphore middleware (the built-in server limit, 600 slots);
* ``limit-concurrency`` (loopback only: it is a server option) — uvicorn's
  ``--limit-concurrency 600``;
* ``slowapi`` / ``slowapi-asgi`` — behind slowapi's ``SlowAPIMiddleware`` /
  ``SlowAPIASGIMiddleware``, an in-memory limit per client address that is never reached
  (:mod:`benchmarks.peer_apps`; skipped when slowapi is not installed);
* ``apf`` — behind :class:`~apf_limiter.asgi.APFMiddleware`, built-in configuration, pure Python;
* ``apf-compiled`` — the same, with the mypyc-compiled modules of ``build/compiled``
  (``make compile``; skipped, and said so, when that tree is absent).

Two measurements, each against ``bare`` in the same interleaved rounds:

* **in-process**: a synthetic ASGI scope driven straight through the app, no server; the cost
  is reported as **µs added per request** (the variant's time per request minus bare's, per
  round). The pure variants run in one child process, the compiled one in another (a process
  imports one apf_limiter); the rounds alternate between them, each against its own bare.
  Each child also times the **engine fast path** (``async with limiter.admit(digest)``) for
  the digest the middleware builds for the same request, in the same rounds: the
  **middleware's own cost** is the apf variant's added time minus it, reported per round and
  as a ratio to the engine fast path.
* **loopback**: uvicorn servers (h11, one worker each), loaded in turn with ``wrk`` when
  installed, else :mod:`benchmarks.loadgen`'s Python generator; a **throughput ratio** to
  bare, per round.

With ``--instructions`` (needs valgrind), also **instructions per request** of bare, apf and
the engine fast path, per build (:mod:`benchmarks.callgrind`): the middleware's own cost
counted, which no noise moves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from apf_limiter import Limiter
from apf_limiter.asgi._identity import build_digest
from apf_limiter.asgi._types import ASGIApp, Message
from benchmarks import bench_app, peer_apps
from benchmarks.bench_app import build_info
from benchmarks.callgrind import available as callgrind_available
from benchmarks.callgrind import instructions_per_operation
from benchmarks.http_bench import _quantiles, machine
from benchmarks.loadgen import generator_ceiling, run_load, wrk_path
from benchmarks.result_file import write_result
from benchmarks.servers import REPO_ROOT, Server, compiled_overlay, compiled_tree, running_server

__all__ = ["IN_PROCESS", "LOOPBACK", "InProcess", "in_process", "loopback"]

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "peers.json"
DEFAULT_COMPILED = REPO_ROOT / "build" / "compiled"

#: In-process variant -> application factory (``apf-compiled`` is ``apf`` in the compiled child).
IN_PROCESS: dict[str, Callable[[], ASGIApp]] = {
    "bare": bench_app.hello_bare,
    "semaphore": bench_app.hello_semaphore,
    "slowapi": peer_apps.hello_slowapi,
    "slowapi-asgi": peer_apps.hello_slowapi_asgi,
    "apf": bench_app.hello_apf,
}
#: Loopback variant -> (``module:factory``, extra uvicorn options, compiled build).
LOOPBACK: dict[str, tuple[str, list[str], bool]] = {
    "bare": ("hello_bare", [], False),
    "semaphore": ("hello_semaphore", [], False),
    "limit-concurrency": ("hello_bare", ["--limit-concurrency", "600"], False),
    "slowapi": ("benchmarks.peer_apps:hello_slowapi", [], False),
    "slowapi-asgi": ("benchmarks.peer_apps:hello_slowapi_asgi", [], False),
    "apf": ("hello_apf", [], False),
    "apf-compiled": ("hello_apf", [], True),
}
_SLOWAPI = ("slowapi", "slowapi-asgi")
_SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.4"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/",
    "raw_path": b"/",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench")],
    "client": ("127.0.0.1", 40000),
    "server": ("127.0.0.1", 8000),
}
_REQUEST: Message = {"type": "http.request", "body": b"", "more_body": False}
#: The engine fast path's entry in a child's times (not an application: nothing is added).
ENGINE = "engine"


class InProcess:
    """Drives requests through an ASGI app in this process: a fresh scope each, no server.

    Args:
        app: The application.
        scope: The request's scope (default: ``GET /`` with no credentials).
    """

    def __init__(self, app: ASGIApp, scope: dict[str, Any] | None = None) -> None:
        self.app = app
        self.scope = _SCOPE if scope is None else scope
        self.responses = 0
        self.statuses: dict[int, int] = {}

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.statuses[message["status"]] = self.statuses.get(message["status"], 0) + 1
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.responses += 1

    async def request(self) -> None:
        """One request: the request body once, then (as a server does) nothing more."""
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:  # like a server whose client stays: wait until cancelled
                await asyncio.get_running_loop().create_future()
            sent = True
            return _REQUEST

        await self.app({**self.scope, "state": {}}, receive, self._send)

    async def run(self, requests: int) -> float:
        """Serve ``requests`` requests one after another; µs per request."""
        started = time.perf_counter()
        for _ in range(requests):
            await self.request()
        return (time.perf_counter() - started) / requests * 1e6


class EngineFastPath:
    """The engine fast path for the digest the middleware builds for the same ``GET /``.

    ``async with limiter.admit(digest)`` and its release, with free seats (what
    :mod:`benchmarks.engine_bench` calls the fast path), on a limiter of the built-in
    configuration, as the ``apf`` variant's. The middleware's own cost is the ``apf`` variant's
    added time minus this.
    """

    def __init__(self) -> None:
        self.limiter = Limiter()
        self.digest = build_digest({**_SCOPE, "state": {}}, None, None, None)

    async def run(self, requests: int) -> float:
        """Admit and release ``requests`` times; µs per admission."""
        limiter, digest = self.limiter, self.digest
        started = time.perf_counter()
        for _ in range(requests):
            async with limiter.admit(digest):
                pass
        return (time.perf_counter() - started) / requests * 1e6


async def _worker(variants: list[str], requests: int) -> None:
    # A child of in_process(): one line of build information, then one line of µs per
    # variant for each "round N" read from stdin, until stdin closes. With "apf", the
    # engine fast path for its digest is timed in the same rounds ("engine").
    drivers: dict[str, InProcess | EngineFastPath] = {
        name: InProcess(IN_PROCESS[name]()) for name in variants
    }
    if "apf" in drivers:
        drivers[ENGINE] = EngineFastPath()
        variants = [*variants, ENGINE]
    for driver in drivers.values():
        await driver.run(max(100, requests // 4))  # warm up: imports, caches, first requests
    print(json.dumps(build_info()), flush=True)
    for line in sys.stdin:
        index = int(line.split()[1])
        order = variants[index % len(variants) :] + variants[: index % len(variants)]
        times = {name: await drivers[name].run(requests) for name in order}
        print(json.dumps(times), flush=True)


async def _count(variant: str, requests: int) -> None:
    # A child of instructions(), run under callgrind: a warm-up, then ``requests`` requests.
    driver = EngineFastPath() if variant == ENGINE else InProcess(IN_PROCESS[variant]())
    await driver.run(200)
    await driver.run(requests)


def instructions(cwd: Path, build: str, *, short: int, long: int) -> dict[str, Any]:
    """Instructions per request of bare and apf, and of the engine fast path, under callgrind.

    Deterministic, unlike the time: the middleware's own cost as ``apf - bare - engine``, and
    its ratio to the engine fast path.

    Args:
        cwd: Where the children run: the repository (pure Python) or a compiled overlay.
        build: The build the children must import there (``pure Python`` or ``compiled``).
        short: Requests in the short run.
        long: Requests in the long run.

    Raises:
        RuntimeError: If a child in ``cwd`` imports another build.
    """
    probe = (
        "import json; from benchmarks.bench_app import build_info; print(json.dumps(build_info()))"
    )
    info = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout
    )
    if info["build"] != build:
        raise RuntimeError(f"expected the {build} build in {cwd}, a child imported {info}")
    counts = {
        name: instructions_per_operation(
            [sys.executable, "-m", "benchmarks.peers", "--count", name],
            "--requests",
            short,
            long,
            cwd,
        )
        for name in ("bare", "apf", ENGINE)
    }
    added = counts["apf"] - counts["bare"]
    own = added - counts[ENGINE]
    return {
        "build": info,
        "requests": [short, long],
        "per_request": counts,
        "apf_added": added,
        "own": own,
        "own_to_engine": own / counts[ENGINE],
    }


class _Child:
    """A child process timing some in-process variants, a round each time it is asked."""

    def __init__(self, variants: list[str], requests: int, cwd: Path, build: str) -> None:
        command = [sys.executable, "-m", "benchmarks.peers", "--worker", ",".join(variants)]
        command += ["--requests", str(requests)]
        self.process = subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.info: dict[str, Any] = json.loads(self._line())
        if self.info["build"] != build:
            self.close()
            raise RuntimeError(f"expected the {build} build, the child imported {self.info}")

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"in-process child exited ({self.process.wait()})")
        return line

    def round(self, index: int) -> dict[str, float]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"round {index}\n")
        self.process.stdin.flush()
        times: dict[str, float] = json.loads(self._line())
        return times

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def in_process(
    variants: list[str], *, rounds: int, requests: int, compiled: Path | None
) -> dict[str, Any]:
    """Per variant: µs per request, and µs added to bare, per round and their spread."""
    pure = [name for name in variants if name != "apf-compiled"]
    times: dict[str, list[float]] = {name: [] for name in variants}
    added: dict[str, list[float]] = {name: [] for name in variants}
    compiled_bare: list[float] = []
    # The apf variants: the engine fast path in the same rounds, and the middleware's own
    # cost (added time minus the engine fast path), per round.
    engines: dict[str, list[float]] = {}
    glue: dict[str, list[float]] = {}
    with ExitStack() as stack:
        # From the repository root the "pure" child runs the sources; from a compiled tree
        # (make test-compiled runs the tests there) it runs that tree, as this process does.
        here = build_info()["build"]
        children = {"pure": _Child(pure, requests, REPO_ROOT, here)}
        stack.callback(children["pure"].close)
        if compiled is not None and "apf-compiled" in variants:
            cwd = stack.enter_context(compiled_overlay(compiled))
            children["compiled"] = _Child(["bare", "apf"], requests, cwd, "compiled")
            stack.callback(children["compiled"].close)
        builds = {name: child.info for name, child in children.items()}
        for index in range(rounds):
            names = list(children)
            for name in names[index % len(names) :] + names[: index % len(names)]:
                measured = children[name].round(index)
                engine = measured.pop(ENGINE, None)
                if name == "compiled":
                    compiled_bare.append(measured["bare"])
                    measured = {"apf-compiled": measured["apf"], "bare": measured["bare"]}
                for variant, value in measured.items():
                    if variant != "bare" or name == "pure":
                        times[variant].append(value)
                        added[variant].append(value - measured["bare"])
                if engine is not None:
                    apf = "apf-compiled" if name == "compiled" else "apf"
                    engines.setdefault(apf, []).append(engine)
                    glue.setdefault(apf, []).append(added[apf][-1] - engine)
            print(
                f"  in-process round {index + 1}/{rounds}: "
                + ", ".join(f"{v} {times[v][-1]:.1f}" for v in variants if times[v])
                + " µs/request"
            )
    ratios = {
        name: [own / engine for own, engine in zip(glue[name], engines[name], strict=True)]
        for name in glue
    }
    return {
        "rounds": rounds,
        "requests_per_round": requests,
        "builds": builds,
        "bare_us_in_the_compiled_child": compiled_bare,
        "variants": {
            name: {
                "us": times[name],
                "us_stats": _quantiles(times[name]),
                "added_us": added[name],
                "added_us_stats": _quantiles(added[name]),
            }
            for name in variants
            if times[name]
        },
        "middleware_own_cost": {
            name: {
                "engine_fast_path_us": engines[name],
                "engine_fast_path_us_stats": _quantiles(engines[name]),
                "own_us": glue[name],
                "own_us_stats": _quantiles(glue[name]),
                "own_to_engine": ratios[name],
                "own_to_engine_stats": _quantiles(ratios[name]),
            }
            for name in glue
        },
    }


def loopback(
    variants: list[str],
    *,
    rounds: int,
    duration: float,
    connections: int,
    warmup: float,
    generator: str,
    compiled: Path | None,
) -> dict[str, Any]:
    """Per variant: requests per second and the ratio to bare, per round and their spread."""
    result: dict[str, Any] = {"generator": generator, "connections": connections}
    result.update(rounds=rounds, duration=duration)
    if generator == "python":
        result["generator_ceiling_rps"] = generator_ceiling(
            connections=connections, duration=duration
        ).rps
    rps: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    failures = dict.fromkeys(variants, 0)
    here = build_info()["build"]  # what the servers run from the repository root run too
    with ExitStack() as stack:
        overlay = stack.enter_context(compiled_overlay(compiled)) if compiled is not None else None
        servers: dict[str, Server] = {}
        for name in variants:
            factory, extra, wants_compiled = LOOPBACK[name]
            servers[name] = stack.enter_context(
                running_server(
                    name, factory, uvicorn_args=extra, http="h11", loop="asyncio",
                    cwd=overlay if wants_compiled else None,
                )
            )  # fmt: skip
            expected = "compiled" if wants_compiled else here
            if servers[name].info["build"] != expected:
                raise RuntimeError(f"{name}: expected the {expected} build: {servers[name].info}")
        result["server_builds"] = {name: server.info for name, server in servers.items()}
        for server in servers.values():
            run_load(generator, server.host, server.port, connections=connections, duration=warmup)
        for index in range(rounds):
            order = variants[index % len(variants) :] + variants[: index % len(variants)]
            measured = {}
            for name in order:
                server = servers[name]
                load = run_load(
                    generator, server.host, server.port, connections=connections, duration=duration
                )
                measured[name] = load.rps
                failures[name] += load.non_2xx + load.errors
            for name in variants:
                rps[name].append(measured[name])
                ratios[name].append(measured[name] / measured["bare"])
            print(
                f"  loopback round {index + 1}/{rounds}: "
                + ", ".join(f"{n} {measured[n]:,.0f}" for n in variants)
                + " req/s"
            )
    result["variants"] = {
        name: {
            "rps": rps[name],
            "rps_stats": _quantiles(rps[name]),
            "ratio_to_bare": ratios[name],
            "ratio_stats": _quantiles(ratios[name]),
            "failures": failures[name],
        }
        for name in variants
    }
    return result


def report(result: dict[str, Any]) -> str:
    """The table: per variant, µs added in-process and the throughput ratio over loopback."""
    inner = result.get("in_process", {}).get("variants", {})
    outer = result.get("loopback", {}).get("variants", {})
    lines = [
        f"{'variant':<18} {'µs/req':>7} {'added µs':>9} {'[min–max]':>15} "
        f"{'req/s':>8} {'ratio':>6} {'[min–max]':>13} {'failed':>6}"
    ]
    for name in dict.fromkeys([*inner, *outer]):
        line = f"{name:<18}"
        if name in inner:
            us, add = inner[name]["us_stats"], inner[name]["added_us_stats"]
            line += f" {us['median']:7.1f} {add['median']:9.1f}"
            line += f" {add['min']:7.1f}–{add['max']:<7.1f}"
        else:
            line += f" {'':7} {'':9} {'':15}"
        if name in outer:
            rps, ratio = outer[name]["rps_stats"], outer[name]["ratio_stats"]
            line += (
                f" {rps['median']:8,.0f} {ratio['median']:6.3f} "
                f"{ratio['min']:6.3f}–{ratio['max']:<6.3f} {outer[name]['failures']:6}"
            )
        lines.append(line)
    own = result.get("in_process", {}).get("middleware_own_cost", {})
    for name, cost in own.items():
        engine, glue, ratio = (
            cost["engine_fast_path_us_stats"],
            cost["own_us_stats"],
            cost["own_to_engine_stats"],
        )
        lines.append(
            f"{name}: engine fast path {engine['median']:.2f} µs, the middleware's own cost "
            f"{glue['median']:.2f} µs = {ratio['median']:.2f}× the engine "
            f"[{ratio['min']:.2f}–{ratio['max']:.2f}]"
        )
    for build, counted in result.get("instructions", {}).items():
        per = counted["per_request"]
        lines.append(
            f"instructions, {build}: bare {per['bare']:,.0f}, apf {per['apf']:,.0f} per request; "
            f"engine fast path {per[ENGINE]:,.0f}; the middleware's own "
            f"{counted['own']:,.0f} = {counted['own_to_engine']:.2f}× the engine"
        )
    lines += [f"Note: {note}" for note in result["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse options, measure, print the table, write the JSON file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # an in-process child
    parser.add_argument("--count", help=argparse.SUPPRESS)  # a child under callgrind
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions per request under callgrind (bare, apf, engine)",
    )
    parser.add_argument("--rounds", type=int, default=15, help="in-process rounds")
    parser.add_argument("--requests", type=int, default=2000, help="requests per in-process round")
    parser.add_argument("--loopback-rounds", type=int, default=8, help="loopback rounds")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per loopback load")
    parser.add_argument("--connections", type=int, default=64, help="keep-alive connections")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per server")
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument(
        "--compiled", type=Path, default=DEFAULT_COMPILED, help="the tree `make compile` makes"
    )
    parser.add_argument("--variants", default=",".join(LOOPBACK), help="comma-separated")
    parser.add_argument("--no-loopback", action="store_true", help="in-process only")
    parser.add_argument("--no-in-process", action="store_true", help="loopback only")
    parser.add_argument("--quick", action="store_true", help="a smoke test: 2 short rounds each")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result file")
    args = parser.parse_args(argv)
    if args.worker:
        asyncio.run(_worker(args.worker.split(","), args.requests))
        return {}
    if args.count:
        asyncio.run(_count(args.count, args.requests))
        return {}
    if args.quick:
        args.rounds, args.requests = 2, 300
        args.loopback_rounds, args.duration, args.warmup = 2, 1.0, 0.3
    variants = ["bare"] + [v for v in args.variants.split(",") if v != "bare"]
    notes = []
    if build_info()["build"] != "pure Python":
        notes.append("run from a compiled tree: the variants but apf-compiled measured it too")
    if not peer_apps.slowapi_installed():
        notes.append("slowapi is not installed (the bench extra has it): slowapi variants skipped")
        variants = [v for v in variants if v not in _SLOWAPI]
    compiled: Path | None = args.compiled.resolve()
    wants_compiled = "apf-compiled" in variants or args.instructions
    missing = compiled_tree(args.compiled) if wants_compiled else None
    if missing is not None:
        notes.append(missing)
        variants, compiled = [v for v in variants if v != "apf-compiled"], None
    generator = args.generator if args.generator != "auto" else "wrk" if wrk_path() else "python"
    result: dict[str, Any] = {
        "machine": machine(),
        "client_build": build_info(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "notes": notes,
    }
    print("\n".join(f"Note: {note}" for note in notes))
    if not args.no_in_process:
        inner = [v for v in variants if v in IN_PROCESS or v == "apf-compiled"]
        result["in_process"] = in_process(
            inner, rounds=args.rounds, requests=args.requests, compiled=compiled
        )
    if not args.no_loopback:
        result["loopback"] = loopback(
            variants,
            rounds=args.loopback_rounds,
            duration=args.duration,
            connections=args.connections,
            warmup=args.warmup,
            generator=generator,
            compiled=compiled,
        )
    if args.instructions:
        if not callgrind_available():
            notes.append("valgrind is not installed: no instruction counts")
        else:
            short, long = (100, 300) if args.quick else (1000, 3000)
            here = build_info()["build"]
            counted = {"pure": instructions(REPO_ROOT, here, short=short, long=long)}
            if compiled is not None:
                with compiled_overlay(compiled) as cwd:
                    counted["compiled"] = instructions(cwd, "compiled", short=short, long=long)
            result["instructions"] = counted
    print(report(result))
    write_result(result, args.out, default=DEFAULT_OUT, quick=args.quick)
    return result


if __name__ == "__main__":
    main()
