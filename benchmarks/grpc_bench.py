"""The gRPC front door's added cost per unary call, against a bare grpc.aio server.

Two real servers on 127.0.0.1 in this process (one bare, one behind
:class:`~apf_limiter.grpc.APFInterceptor` with the built-in configuration), each with the same
raw-bytes unary method; a client makes ``--calls`` sequential calls to one, then the other,
for ``--rounds`` interleaved rounds (so drift in a shared machine hits both alike). Reported:
the median time per call of each and the interceptor's added microseconds and ratio.

    python -m benchmarks.grpc_bench --rounds 9 --calls 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import grpc

from apf_limiter.grpc import APFInterceptor


async def _echo(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return request


async def _server(interceptors: list[grpc.aio.ServerInterceptor]) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(interceptors=interceptors)
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo)
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.B", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def measure(rounds: int, calls: int) -> dict[str, float]:
    """Seconds per call, bare and behind the interceptor, interleaved; the median of rounds."""
    bare, bare_port = await _server([])
    interceptor = APFInterceptor()
    guarded, guarded_port = await _server([interceptor])
    per_call: dict[str, list[float]] = {"bare": [], "apf": []}
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{bare_port}") as bare_channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{guarded_port}") as guarded_channel,
        ):
            targets: dict[str, grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]] = {
                "bare": bare_channel.unary_unary("/bench.B/Echo"),
                "apf": guarded_channel.unary_unary("/bench.B/Echo"),
            }
            for target in targets.values():  # warm up: connections, caches
                for _ in range(50):
                    await target(b"x")
            for _ in range(rounds):
                for name, target in targets.items():
                    began = time.perf_counter()
                    for _ in range(calls):
                        await target(b"x")
                    per_call[name].append((time.perf_counter() - began) / calls)
    finally:
        await bare.stop(grace=None)
        await guarded.stop(grace=None)
        interceptor.limiter.close()
    bare_s, apf_s = statistics.median(per_call["bare"]), statistics.median(per_call["apf"])
    return {
        "bare_us": bare_s * 1e6,
        "apf_us": apf_s * 1e6,
        "added_us": (apf_s - bare_s) * 1e6,
        "ratio": apf_s / bare_s,
    }


def main() -> None:
    """Run the measurement and print it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.rounds, args.calls)), indent=2))


if __name__ == "__main__":
    main()
