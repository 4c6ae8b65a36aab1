"""Configuration: one typed section per stage, composed into `TraceConfig`, loaded from YAML, overridable by flags."""

from trace_rl.config.core import (
    Section,
    ModelConfig,
    format_validation_error,
    read_yaml,
    EnvConfig,
    RunSection,
    RolloutConfig,
    ExecutorConfig,
    TraceConfig,
    apply_overrides,
    load_config,
    executor_with,
    model_from_spec,
    ExecutorKind,
    EXECUTOR_STAGES,
    FORWARDED_ENV,
)

__all__ = [
    "EXECUTOR_STAGES",
    "EnvConfig",
    "ExecutorConfig",
    "ExecutorKind",
    "FORWARDED_ENV",
    "ModelConfig",
    "RolloutConfig",
    "RunSection",
    "Section",
    "TraceConfig",
    "apply_overrides",
    "executor_with",
    "format_validation_error",
    "load_config",
    "model_from_spec",
    "read_yaml",
]
