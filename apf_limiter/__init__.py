"""apf_limiter: Kubernetes API Priority and Fairness for Python.

An embeddable asyncio concurrency limiter with priority levels, fair queuing between flows,
seat borrowing between levels, and a pure-ASGI middleware.
"""

from apf_limiter._version import __version__
from apf_limiter.config.loader import load_config
from apf_limiter.config.model import Configuration
from apf_limiter.digest import RequestDigest
from apf_limiter.engine.shuffle_sharding import Dealer
from apf_limiter.engine.statistics import (
    FlowSchemaStatistics,
    LimiterStatistics,
    PriorityLevelStatistics,
)
from apf_limiter.errors import ConfigError, ConfigProblem, Rejected
from apf_limiter.limiter import Admission, Limiter

__all__ = [
    "Admission",
    "ConfigError",
    "ConfigProblem",
    "Configuration",
    "Dealer",
    "FlowSchemaStatistics",
    "Limiter",
    "LimiterStatistics",
    "PriorityLevelStatistics",
    "Rejected",
    "RequestDigest",
    "__version__",
    "load_config",
]
