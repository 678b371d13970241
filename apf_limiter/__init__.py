"""apf_limiter: Kubernetes API Priority and Fairness for Python.

An embeddable asyncio concurrency limiter with priority levels, fair queuing between flows,
seat borrowing between levels, and a pure-ASGI middleware.
"""

from typing import TYPE_CHECKING

from apf_limiter._digest import RequestDigest
from apf_limiter._errors import ConfigError, ConfigProblem, Rejected
from apf_limiter._version import __version__
from apf_limiter.config._model import Configuration
from apf_limiter.engine._dump import (
    EngineDump,
    FlowCount,
    LevelDump,
    QueueDump,
    RequestDump,
    WaitingSummary,
)
from apf_limiter.engine._shuffle_sharding import Dealer
from apf_limiter.engine._statistics import (
    FlowSchemaStatistics,
    LimiterStatistics,
    PriorityLevelStatistics,
)
from apf_limiter.limiter import Admission, Limiter, Phase, ShadowOutcome

if TYPE_CHECKING:
    from apf_limiter.asgi import APFMiddleware
    from apf_limiter.config._sources import load_config

__all__ = [
    "APFMiddleware",
    "Admission",
    "ConfigError",
    "ConfigProblem",
    "Configuration",
    "Dealer",
    "EngineDump",
    "FlowCount",
    "FlowSchemaStatistics",
    "LevelDump",
    "Limiter",
    "LimiterStatistics",
    "Phase",
    "PriorityLevelStatistics",
    "QueueDump",
    "Rejected",
    "RequestDigest",
    "RequestDump",
    "ShadowOutcome",
    "WaitingSummary",
    "__version__",
    "load_config",
]


def __getattr__(name: str) -> object:
    # The middleware and the configuration loader (and what they import) load when first used.
    if name == "APFMiddleware":
        from apf_limiter.asgi import APFMiddleware

        return APFMiddleware
    if name == "load_config":
        from apf_limiter.config._sources import load_config

        return load_config
    raise AttributeError(f"module 'apf_limiter' has no attribute {name!r}")
