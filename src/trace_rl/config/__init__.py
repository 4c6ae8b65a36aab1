"""Configuration: one typed section per stage, composed into `TraceConfig`, loaded from YAML, overridable by flags.

`base.py` holds what every section shares, one module per stage section holds its model (`diagnose.py`,
`synthesize.py`, `train.py`, `route.py`, `evaluate.py`), and `core.py` composes them with the run, models, env,
rollout and executor sections.
"""

from trace_rl.config.base import Section, apply_overrides, format_validation_error, read_yaml, section_with
from trace_rl.config.core import (
    EXECUTOR_STAGES,
    FORWARDED_ENV,
    EnvConfig,
    ExecutorConfig,
    ExecutorKind,
    ModelConfig,
    RolloutConfig,
    RunSection,
    TraceConfig,
    config_from_record,
    executor_with,
    load_config,
)
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.config.route import RouteConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.config.train import TrainConfig

__all__ = [
    "EXECUTOR_STAGES",
    "FORWARDED_ENV",
    "DiagnoseConfig",
    "EnvConfig",
    "EvaluateConfig",
    "ExecutorConfig",
    "ExecutorKind",
    "ModelConfig",
    "RolloutConfig",
    "RouteConfig",
    "RunSection",
    "Section",
    "SynthesizeConfig",
    "TraceConfig",
    "TrainConfig",
    "apply_overrides",
    "config_from_record",
    "executor_with",
    "format_validation_error",
    "load_config",
    "read_yaml",
    "section_with",
]
