"""The frozen base policy of a run, which routing classifies with and evaluation plays: which model (name and
config), its label in records, and its decoding.

The base model is the one given (`--model`), else the run's rollout policy, else the model the run's adapters were
trained on (their `train_config.json`). Decoding follows rollout: explicit values, else the run's rollout settings,
else the model's own.
"""

from __future__ import annotations

from trace_rl.artifacts.adapters import adapters_base_model
from trace_rl.artifacts.store import RunDir
from trace_rl.config import ModelConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.models.base import SamplingParams
from trace_rl.models.specs import add_model_spec, model_from_spec


def policy_model(cfg: TraceConfig, run: RunDir, spec: str | None) -> tuple[str, ModelConfig, list[str]]:
    """(name, config, warnings) of the base policy: `spec` when given, else the run's rollout policy, else the
    adapters' base model. The name is added to `cfg.models`."""
    warnings: list[str] = []
    trained_on = adapters_base_model(run)
    if spec is not None:
        name = add_model_spec(cfg, spec)
    elif cfg.rollout.policy in cfg.models:
        name = cfg.rollout.policy
    elif trained_on is not None:
        name, model_cfg = model_from_spec(trained_on, cfg)
        cfg.models.setdefault(name, model_cfg)
    else:
        raise UserError("no base model: pass --model (the model the adapters were trained on)")
    model_cfg = cfg.models[name]
    if trained_on is not None and model_cfg.kind in ("local", "tiny") and model_cfg.model not in ("", trained_on):
        warnings.append(f"the adapters were trained on '{trained_on}', the policy is '{model_cfg.model}'")
    return name, model_cfg, warnings


def model_label(name: str, model_cfg: ModelConfig | None) -> str:
    """The model's name in records: its model id, else its config name."""
    return (model_cfg.model if model_cfg is not None else "") or name


def policy_sampling(
    cfg: TraceConfig, model_cfg: ModelConfig | None, *, temperature: float | None = None, max_tokens: int | None = None
) -> SamplingParams:
    """The policy's decoding: explicit values, else the run's rollout settings, else the model's (as rollout does)."""
    r, base = cfg.rollout, model_cfg or ModelConfig()
    if temperature is None:
        temperature = r.temperature if r.temperature is not None else base.temperature
    if max_tokens is None:
        max_tokens = r.max_tokens if r.max_tokens is not None else base.max_tokens
    return SamplingParams(temperature=temperature, top_p=base.top_p, top_k=base.top_k, max_tokens=max_tokens)


__all__ = ["model_label", "policy_model", "policy_sampling"]
