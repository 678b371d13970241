"""apf_limiter: Kubernetes API Priority and Fairness for Python."""

from apf_limiter._version import __version__
from apf_limiter.digest import RequestDigest
from apf_limiter.errors import ConfigError, Rejected

__all__ = ["ConfigError", "Rejected", "RequestDigest", "__version__"]
