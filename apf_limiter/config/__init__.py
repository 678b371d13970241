"""Configuration: the frozen model, loading, validation and built-in defaults.

The model loads with the package; loading, validation, dumping and the built-in configurations
load at first use, so that a program that builds its :class:`Configuration` itself (or only
imports :mod:`apf_limiter`) does not pay for the parser.
"""

from typing import TYPE_CHECKING

from apf_limiter.config._model import (
    Configuration,
    ExemptPriorityLevelConfiguration,
    FlowDistinguisherMethod,
    FlowSchema,
    LimitedPriorityLevelConfiguration,
    LimitResponse,
    NonResourcePolicyRule,
    PolicyRulesWithSubjects,
    PriorityLevel,
    QueuingConfiguration,
    ResourcePolicyRule,
    Subject,
)

if TYPE_CHECKING:
    from apf_limiter.config._defaults import (
        MANDATORY_FLOW_SCHEMAS,
        MANDATORY_PRIORITY_LEVELS,
        default_configuration,
        kubernetes_bootstrap_configuration,
    )
    from apf_limiter.config._serialize import dump_config
    from apf_limiter.config._sources import load_config, load_config_text

__all__ = [
    "Configuration",
    "ExemptPriorityLevelConfiguration",
    "FlowDistinguisherMethod",
    "FlowSchema",
    "LimitResponse",
    "LimitedPriorityLevelConfiguration",
    "MANDATORY_FLOW_SCHEMAS",
    "MANDATORY_PRIORITY_LEVELS",
    "NonResourcePolicyRule",
    "PolicyRulesWithSubjects",
    "PriorityLevel",
    "QueuingConfiguration",
    "ResourcePolicyRule",
    "Subject",
    "default_configuration",
    "dump_config",
    "kubernetes_bootstrap_configuration",
    "load_config",
    "load_config_text",
]

# Each name loaded at first use, and the private module it comes from.
_LAZY = {
    "MANDATORY_FLOW_SCHEMAS": "_defaults",
    "MANDATORY_PRIORITY_LEVELS": "_defaults",
    "default_configuration": "_defaults",
    "kubernetes_bootstrap_configuration": "_defaults",
    "dump_config": "_serialize",
    "load_config": "_sources",
    "load_config_text": "_sources",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'apf_limiter.config' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"apf_limiter.config.{module}"), name)
    globals()[name] = value  # the next lookup finds it at once
    return value
