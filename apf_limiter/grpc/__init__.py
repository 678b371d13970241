"""The gRPC front door: a ``grpc.aio`` server interceptor on the request gate.

Install with the ``grpc`` extra (``pip install apf-limiter[grpc]``)::

    import grpc
    from apf_limiter.grpc import APFInterceptor

    server = grpc.aio.server(interceptors=[APFInterceptor(config="apf.yaml")])

A refused call is answered ``RESOURCE_EXHAUSTED`` with :data:`RETRY_PUSHBACK_KEY` (what
gRPC's retry policy honours), :data:`REASON_KEY` and the APF names in its trailing metadata.
See ``docs/grpc.md``.
"""

from apf_limiter.grpc._call import (
    FLOW_SCHEMA_KEY,
    PRIORITY_LEVEL_KEY,
    QUEUE_WAIT_KEY,
    REASON_KEY,
    RETRY_PUSHBACK_KEY,
    SHADOW_KEY,
    peer_host,
)
from apf_limiter.grpc._interceptor import APFInterceptor

__all__ = [
    "APFInterceptor",
    "FLOW_SCHEMA_KEY",
    "PRIORITY_LEVEL_KEY",
    "QUEUE_WAIT_KEY",
    "REASON_KEY",
    "RETRY_PUSHBACK_KEY",
    "SHADOW_KEY",
    "peer_host",
]
