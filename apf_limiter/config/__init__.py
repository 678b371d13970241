"""Configuration: the frozen model, loading, validation and built-in defaults."""

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
    "NonResourcePolicyRule",
    "PolicyRulesWithSubjects",
    "PriorityLevel",
    "QueuingConfiguration",
    "ResourcePolicyRule",
    "Subject",
]
