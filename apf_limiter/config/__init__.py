"""Configuration: the frozen model, loading, validation and built-in defaults."""

from apf_limiter.config._defaults import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    default_configuration,
    kubernetes_bootstrap_configuration,
)
from apf_limiter.config._dump import dump_config
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
