"""Configuration: the frozen model, loading, validation and built-in defaults."""

from apf_limiter.config.defaults import (
    MANDATORY_FLOW_SCHEMAS,
    MANDATORY_PRIORITY_LEVELS,
    default_configuration,
    kubernetes_bootstrap_configuration,
)
from apf_limiter.config.dump import dump_config
from apf_limiter.config.loader import load_config, load_config_text
from apf_limiter.config.model import (
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
