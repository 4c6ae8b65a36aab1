"""The pieces TRL's GRPO training is built from: device and precision, the base policy and its tokenizer, the LoRA
config, the `GRPOConfig` (one optimizer step per G·K rollouts; experiment tracking per `run.report_to`), the episode
limits, and the dataset of seeds.

Each is a plain function of the `TrainConfig` (and the environment), so `trl_backend.TRLBackend` composes them and
the benchmarks can time them one by one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.config.train import TrainConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.sampler import HFSampler, TurnSampler
from trace_rl.errors import UserError
from trace_rl.tracking import TrackingSettings, trainer_arguments
from trace_rl.training.grouping import SeedTable
from trace_rl.training.protocol import TrainEnv
from trace_rl.training.rollout_func import seed_rows


def cpu_supports_bf16() -> bool:
    """AVX-512-bf16 or AMX on this CPU (where bf16 matmuls are fast)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_device(cfg: TrainConfig) -> str:
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def resolve_bf16(cfg: TrainConfig, device: str) -> bool:
    import torch

    if cfg.bf16 != "auto":
        return cfg.bf16 == "true"
    if device == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return cpu_supports_bf16()


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def batch_layout(cfg: TrainConfig, world: int) -> tuple[int, int]:
    """(per-device micro batch, gradient-accumulation steps) so that one optimizer step covers all G·K rollouts."""
    k, g = cfg.num_generations, cfg.groups_per_step
    if g % world:
        raise UserError(f"groups_per_step={g} must be a multiple of the {world} processes (a group never spans two)")
    local = g * k // world
    micro = min(cfg.micro(), local)
    if local % micro:
        raise UserError(f"micro_batch_size={micro} must divide the {local} rollouts each process makes per step")
    return micro, local // micro


def load_policy(cfg: TrainConfig, device: str, bf16: bool) -> tuple[Any, Any, Path]:
    """Base model (bf16 or fp32) and its tokenizer (left padding; ChatML-with-tools template when it has none)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_rl.models.chat_format import CHATML_TOOLS_TEMPLATE
    from trace_rl.models.resolve import resolve_model_path

    path = resolve_model_path(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if device == "cuda" and world_size() == 1:
        model = model.to("cuda")
    return model, tokenizer, path


def lora_config(cfg: TrainConfig, model: Any) -> Any:
    from peft import LoraConfig

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in cfg.lora_targets if t in present]
    if not targets:
        raise UserError(f"none of lora_targets {cfg.lora_targets} is a module of {type(model).__name__}")
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )


def grpo_args(
    cfg: TrainConfig, output_dir: Path, *, device: str, bf16: bool, tracking: TrackingSettings | None = None
) -> Any:
    """TRL's config; `tracking` (the run's `report_to`) turns on transformers' integration callback for it (trackio:
    project and run name set, logged to its local folder, no Space), else nothing is reported anywhere."""
    from trl import GRPOConfig

    micro, accumulation = batch_layout(cfg, world_size())
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=cfg.warmup_steps,
        max_grad_norm=cfg.max_grad_norm,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_episode_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        importance_sampling_level=cfg.importance_sampling_level,
        num_iterations=cfg.num_iterations,
        bf16=bf16,
        fp16=False,
        use_cpu=device == "cpu",
        gradient_checkpointing=cfg.gradient_checkpointing,
        disable_dropout=True,
        **trainer_arguments(tracking),
        save_strategy="steps",
        save_steps=cfg.save_interval(),
        save_total_limit=cfg.save_total_limit,
        logging_steps=cfg.logging_steps,
        seed=cfg.seed,
        shuffle_dataset=True,
        log_completions=False,
        dataloader_num_workers=0,
    )


def hf_sampler_for(tokenizer: Any) -> Callable[[Any], TurnSampler]:
    """Sampling with the trainer's own (PEFT) model, unwrapped the way TRL unwraps it for generation."""
    cache: dict[int, HFSampler] = {}

    def make(trainer: Any) -> TurnSampler:
        if id(trainer) not in cache:
            from trl.models.utils import unwrap_model_for_generation

            def context() -> Any:
                return unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator)

            cache[id(trainer)] = HFSampler(trainer.model, tokenizer, model_context=context)
        return cache[id(trainer)]

    return make


def training_seeds(env: TrainEnv, cfg: TrainConfig) -> list[int]:
    """Candidate seeds for the dataset rows: the environment's train split if it has one, else consecutive seeds."""
    split = getattr(env, "train_seeds", None)
    if split:
        return list(split)
    return list(range(cfg.train_seed_start, cfg.train_seed_start + 4 * cfg.rows_needed() + 16))


def held_out_seeds(env: TrainEnv, cfg: TrainConfig) -> list[int]:
    split = getattr(env, "test_seeds", None)
    return list(split)[: len(cfg.held_out_seeds)] if split else list(cfg.held_out_seeds)


def hint_fraction(env: TrainEnv, cfg: TrainConfig) -> float:
    """The configured fraction, else the environment's own (a synthesized spec's), else 0."""
    if cfg.hint_fraction is not None:
        return cfg.hint_fraction
    return float(getattr(env, "hint_fraction", 0.0) or 0.0)


def limits_of(cfg: TrainConfig) -> EpisodeLimits:
    return EpisodeLimits(
        max_turn_tokens=cfg.max_turn_tokens,
        max_episode_tokens=cfg.max_episode_tokens,
        max_turns=cfg.max_turns,
        max_steps=cfg.max_steps_per_episode,
        max_errors=cfg.max_errors,
    )


def build_dataset(env: TrainEnv, cfg: TrainConfig, limits: EpisodeLimits) -> tuple[Any, SeedTable, dict[str, Any]]:
    """One row per seed (`prompt`, `seed`), as many as the run needs; the seed table rollout_func looks seeds up in."""
    from datasets import Dataset

    table = SeedTable()
    need = cfg.rows_needed()
    rows: list[dict[str, Any]] = []
    skipped: list[int] = []
    candidates = training_seeds(env, cfg)
    for start in range(0, len(candidates), 64):
        got, skip = seed_rows(env, candidates[start : start + 64], limits, table)
        rows.extend(got)
        skipped.extend(skip)
        if len(rows) >= need:
            break
    if not rows:
        raise UserError(f"environment '{env.name}': no training seed gives a prompt the agent can answer")
    rows = rows[:need]
    info = {"rows": len(rows), "skipped_seeds": len(skipped), "first_seed": rows[0]["seed"], "needed": need}
    return Dataset.from_list(rows), table, info


class _DroppedGroupFilter(logging.Filter):
    """Dropped groups return reward None on purpose; TRL warns (with the whole prompt) for each. Keep it quiet."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "All reward functions returned None" not in record.getMessage()


def quiet_dropped_group_warnings() -> None:
    log = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _DroppedGroupFilter) for f in log.filters):
        log.addFilter(_DroppedGroupFilter())


__all__ = [
    "batch_layout",
    "build_dataset",
    "cpu_supports_bf16",
    "grpo_args",
    "held_out_seeds",
    "hf_sampler_for",
    "hint_fraction",
    "limits_of",
    "load_policy",
    "lora_config",
    "quiet_dropped_group_warnings",
    "resolve_bf16",
    "resolve_device",
    "training_seeds",
    "world_size",
]
