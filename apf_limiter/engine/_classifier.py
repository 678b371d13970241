"""The classifier: a request digest -> flow schema, priority level, flow distinguisher and hash.

Flow schemas are scanned in matching order -- ``exempt`` first, then (matching precedence,
name), then ``catch-all`` last -- and the first one with a matching rule wins; when none
matches, the ``catch-all`` schema is used, as Kubernetes does.

For speed, the schemas' rules are compiled at construction into a verb- and subject-indexed
:class:`~apf_limiter.engine._match_index.MatchIndex`. Classifications are frozen
and shared: one per schema without a distinguisher, and a bounded cache per distinguisher
otherwise, so a repeat flow costs a dictionary lookup and its flow hash is computed once.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

import xxhash

from apf_limiter._digest import RequestDigest, show_header_values
from apf_limiter.config._model import FlowSchema
from apf_limiter.config._names import CATCH_ALL as CATCH_ALL_FLOW_SCHEMA
from apf_limiter.config._names import EXEMPT as EXEMPT_FLOW_SCHEMA
from apf_limiter.engine._match_index import MatchIndex

_UINT64: Final = 1 << 64
# Per schema; bounds memory when distinguishers are unbounded (e.g. client addresses). Past the
# limit the cache is simply emptied: cheaper than LRU bookkeeping, and a miss costs about 1 µs.
_CACHE_LIMIT = 16384
# Longer distinguishers are not cached: a client picks its header value (ByHeader), and 16,384
# values of the 16 KiB a server may accept would pin ~270 MB per schema. Names that long are
# rare enough that hashing them each time costs nothing that matters.
_CACHEABLE_LENGTH = 256

_BY_USER: Final = 1
_BY_NAMESPACE: Final = 2
_BY_CLIENT_IP: Final = 3
_BY_HEADER: Final = 4
_DISTINGUISHER_KINDS: Final = {
    "ByUser": _BY_USER,
    "ByNamespace": _BY_NAMESPACE,
    "ByClientIP": _BY_CLIENT_IP,
    "ByHeader": _BY_HEADER,
}


def flow_hash(flow_schema_name: str, distinguisher: str, seed: int) -> int:
    r"""The flow hash: seeded 64-bit xxhash of ``schema + "\0" + distinguisher``.

    Deviation D1 (docs/internals.md): upstream's ``hashFlowID`` is unkeyed.

    Args:
        flow_schema_name: The matched flow schema's name.
        distinguisher: The flow distinguisher.
        seed: The hash seed; reduced modulo 2**64.

    Returns:
        An unsigned 64-bit integer, the input of the shuffle-sharding dealer.
    """
    # surrogatepass: a name from an application's own hook may hold a lone surrogate
    # (json.loads of "\udcff", say); it must get a flow, not fail the request.
    data = f"{flow_schema_name}\0{distinguisher}".encode("utf-8", "surrogatepass")
    return int(xxhash.xxh64_intdigest(data, seed=seed % _UINT64))


@dataclass(frozen=True, slots=True)
class Classification:
    """The result of classifying one request.

    Instances are shared between requests of the same flow; they are immutable.

    Attributes:
        flow_schema: The matched flow schema.
        priority_level: The name of the schema's priority level.
        distinguisher: The flow distinguisher (``""`` when the schema has no method).
        flow_hash: The flow's hash (:func:`flow_hash` with the classifier's seed); meaningful
            only for queuing levels with more than one queue.
    """

    flow_schema: FlowSchema
    priority_level: str
    distinguisher: str
    flow_hash: int


def order_flow_schemas(
    flow_schemas: Sequence[FlowSchema], imagined: Collection[str] = ()
) -> tuple[FlowSchema, ...]:
    """Return the schemas in matching order, as Kubernetes digests them.

    The schemas are sorted by matching precedence, then name (code-point order, which is the
    byte order of UTF-8). A mandatory schema that the configuration did not give (named in
    ``imagined``: :attr:`Configuration.imagined_flow_schemas`) goes first (``exempt``) or last
    (``catch-all``) instead; a given one is sorted with the others, so a given ``catch-all``
    precedes a schema of the same precedence whose name sorts after it.

    Args:
        flow_schemas: The schemas, in any order.
        imagined: Names of the mandatory schemas that were added rather than given.

    Returns:
        The schemas in the order they are tried.

    Raises:
        ValueError: If two schemas have the same name.
    """
    seen: set[str] = set()
    for schema in flow_schemas:
        if schema.name in seen:
            raise ValueError(f"flow schema names must be unique; {schema.name!r} is repeated")
        seen.add(schema.name)

    def key(schema: FlowSchema) -> tuple[int, int, str]:
        if schema.name in imagined:
            if schema.name == EXEMPT_FLOW_SCHEMA:
                return (0, 0, "")
            if schema.name == CATCH_ALL_FLOW_SCHEMA:
                return (2, 0, "")
        return (1, schema.matching_precedence, schema.name)

    return tuple(sorted(flow_schemas, key=key))


class _Target:
    """A matched schema's way to its classifications (distinguisher and cache)."""

    __slots__ = ("cache", "fixed", "header", "kind", "schema", "seed")

    def __init__(self, schema: FlowSchema, seed: int) -> None:
        self.schema = schema
        self.seed = seed
        method = schema.distinguisher_method
        self.header = ""
        self.kind = 0
        if method is not None:
            kind = _DISTINGUISHER_KINDS.get(method.type)
            if kind is None:
                raise ValueError(
                    f"flow schema {schema.name!r}: unsupported distinguisher method type "
                    f"{method.type!r} (supported: {', '.join(sorted(_DISTINGUISHER_KINDS))})"
                )
            if kind == _BY_HEADER and not method.header:
                raise ValueError(
                    f"flow schema {schema.name!r}: a ByHeader distinguisher needs a header name"
                )
            self.kind = kind
            self.header = method.header.lower()
            if kind == _BY_HEADER:
                show_header_values(self.header)  # what the request is classified by
        self.cache: dict[str, Classification] = {}
        self.fixed = self._build("")

    def _build(self, distinguisher: str) -> Classification:
        name = self.schema.name
        return Classification(
            self.schema,
            self.schema.priority_level,
            distinguisher,
            flow_hash(name, distinguisher, self.seed),
        )

    def classification(self, digest: RequestDigest) -> Classification:
        kind = self.kind
        if kind == 0:
            return self.fixed
        if kind == _BY_USER:
            distinguisher = digest.user
        elif kind == _BY_NAMESPACE:
            # Non-resource requests have no namespace, whatever the digest carries.
            distinguisher = digest.namespace if digest.resource else ""
        elif kind == _BY_CLIENT_IP:
            distinguisher = digest.client
        else:
            distinguisher = digest.headers.get(self.header, "")
        if len(distinguisher) > _CACHEABLE_LENGTH:
            return self._build(distinguisher)
        cache = self.cache
        found = cache.get(distinguisher)
        if found is None:
            if len(cache) >= _CACHE_LIMIT:
                cache.clear()
            found = cache[distinguisher] = self._build(distinguisher)
        return found


class Classifier:
    """Classifies requests by a fixed list of flow schemas.

    Args:
        flow_schemas: The schemas, in any order; names must be unique.
        hash_seed: The seed of the flow hash (reduced modulo 2**64).
        imagined: Names of the mandatory schemas the configuration did not give (see
            :func:`order_flow_schemas`).

    Raises:
        ValueError: On repeated schema names or an unusable distinguisher method.
    """

    __slots__ = ("_catch_all", "_flow_schemas", "_given", "_imagined", "_index", "_seed")

    def __init__(
        self,
        flow_schemas: Sequence[FlowSchema],
        *,
        hash_seed: int,
        imagined: Collection[str] = (),
    ) -> None:
        self._seed = hash_seed % _UINT64
        # What it was built from, as given: built_for() compares by identity.
        self._given = flow_schemas
        self._imagined = imagined
        self._flow_schemas = order_flow_schemas(flow_schemas, imagined)
        targets = [(schema, _Target(schema, self._seed)) for schema in self._flow_schemas]
        self._index = MatchIndex(targets)
        self._catch_all = next(
            (target for schema, target in targets if schema.name == CATCH_ALL_FLOW_SCHEMA), None
        )

    @property
    def flow_schemas(self) -> tuple[FlowSchema, ...]:
        """The schemas in the order they are tried."""
        return self._flow_schemas

    @property
    def hash_seed(self) -> int:
        """The flow-hash seed (already reduced modulo 2**64)."""
        return self._seed

    def built_for(self, flow_schemas: Sequence[FlowSchema], imagined: Collection[str]) -> bool:
        """Whether it was built from these very schemas (the same objects: no comparing)."""
        return flow_schemas is self._given and imagined is self._imagined

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self._flow_schemas)
        return f"<Classifier [{names}]>"

    def classify(self, digest: RequestDigest) -> Classification:
        """Classify a request: the first schema (in matching order) with a matching rule wins.

        Args:
            digest: The request.

        Returns:
            The classification; the ``catch-all`` schema's when no schema matches.

        Raises:
            LookupError: If no schema matches and there is no ``catch-all`` schema.
        """
        target = self._index.find(digest)
        if target is None:
            target = self._catch_all
            if target is None:
                raise LookupError(
                    f"no flow schema matches the request (user {digest.user!r}, verb "
                    f"{digest.verb!r}) and there is no {CATCH_ALL_FLOW_SCHEMA!r} flow schema to "
                    "fall back on"
                )
        return target.classification(digest)


def classifier_for(
    flow_schemas: Sequence[FlowSchema],
    imagined: Collection[str],
    hash_seed: int,
    candidates: Sequence[Classifier | None] = (),
) -> Classifier:
    """The first candidate built from these very schemas, or a new classifier.

    Building one for thousands of schemas is nearly all the work of applying a configuration:
    the reload builds it on its worker thread beforehand (it reads nothing live), and a new
    configuration with the same schemas (a new server limit) keeps the one in force.
    """
    for candidate in candidates:
        if candidate is not None and candidate.built_for(flow_schemas, imagined):
            return candidate
    return Classifier(flow_schemas, hash_seed=hash_seed, imagined=imagined)
