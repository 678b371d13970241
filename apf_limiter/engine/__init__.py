"""The sans-IO core: no asyncio, no clock reads, no logging, no I/O.

Every module here is private. The shell (:mod:`apf_limiter.limiter`) drives the engine through
the controller's entry points, which take ``now`` and return what changed; observability reads
the engine only through the frozen values of its read interface. docs/internals.md maps the
modules to the upstream Kubernetes sources.
"""
