"""A grpc.aio server behind APFInterceptor, and a client calling it (no protoc: raw bytes).

Run it: ``python examples/grpc_server.py``. One level of 2 seats, fair per user (the bearer
token in the ``authorization`` metadata); ``/demo.Jobs/Watch`` is long-running. Six calls of
one user at once: two run, the others queue; a refusal would be ``RESOURCE_EXHAUSTED`` with
``grpc-retry-pushback-ms`` in its trailing metadata.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from apf_limiter.grpc import APFInterceptor

CONFIG: dict[str, Any] = {
    "serverConcurrencyLimit": 2,
    "requestWaitLimit": 10,
    "priorityLevels": [
        {
            "name": "jobs",
            "limited": {
                "nominalConcurrencyShares": 10000,
                "lendablePercent": 0,
                "limitResponse": {
                    "type": "Queue",
                    "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10},
                },
            },
        }
    ],
    "flowSchemas": [
        {
            "name": "callers",
            "priorityLevelConfiguration": {"name": "jobs"},
            "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                    "nonResourceRules": [{"verbs": ["post"], "nonResourceURLs": ["/demo.Jobs/*"]}],
                }
            ],
        }
    ],
}


def bearer_user(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The user is the bearer token (a demo: check real tokens in real services)."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[7:] or None
    return None


async def run(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    await asyncio.sleep(0.05)
    return b"done " + request


async def main() -> list[tuple[bytes, dict[str, str]]]:
    """Serve on a free port, make six calls at once, return the replies and their trailers."""
    interceptor = APFInterceptor(
        config=CONFIG, identify=bearer_user, long_running={"/demo.Jobs/Watch"}
    )
    server = grpc.aio.server(interceptors=[interceptor])
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "Run": grpc.unary_unary_rpc_method_handler(run)
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("demo.Jobs", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/demo.Jobs/Run"
            )
            calls = [
                call(b"%d" % n, metadata=(("authorization", "Bearer alice"),)) for n in range(6)
            ]
            results = []
            for pending in calls:
                reply: bytes = await pending
                trailers = {
                    key: str(value) for key, value in await pending.trailing_metadata() or ()
                }
                results.append((reply, trailers))
    finally:
        await server.stop(grace=None)
        interceptor.limiter.close()
    return results


if __name__ == "__main__":
    for reply, trailers in asyncio.run(main()):
        print(reply.decode(), {k: v for k, v in trailers.items() if k.startswith("x-apf-")})
