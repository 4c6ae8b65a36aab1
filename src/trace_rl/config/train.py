"""`TrainConfig`: every knob of stage 3 (GRPO per capability), with the paper's or the released code's value as default.

Defaults follow TRACE where it states a value (paper §3.4/§4.1: AdamW lr 1e-5, up to 40 iterations, temperature 1.0,
per-group std, per-token ratio, no KL) and the released code where the paper is silent (K = 16 rollouts per group,
G = 4 groups per iteration, LoRA r = 16 / alpha = 16 on q/k/v/o, clip 0.28 above, grad-norm clip 1.0, one optimizer step
per iteration, dynamic re-sampling up to 3 attempts until half the groups are informative). The CPU smoke runs override
K, G, lengths and steps from the command line (`trace-rl train --steps 8 --num-generations 4 ...`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from trace_rl.config.base import Section
from trace_rl.config.serving import VLLMServerSettings


def steps_at_fractions(steps: int, fractions: list[float]) -> list[int]:
    """Optimizer steps at the budget fractions of a `steps`-step training (distinct, sorted, below the last)."""
    return sorted({max(1, round(f * steps)) for f in fractions} - {steps}) if steps > 0 else []


class TrainConfig(Section):
    """Stage 3: one LoRA adapter per capability environment, trained with multi-turn GRPO."""

    backend: Literal["trl"] = Field("trl", description="Training engine (TrainerBackend); only TRL's GRPOTrainer now.")
    model: str = Field("smollm2-135m", description="Policy base model: a local folder, an alias (tiny, smollm2-135m).")

    # -- LoRA (released code: r=16, alpha=16, q/k/v/o) ------------------------------------------------------------
    lora_r: int = Field(16, ge=1, description="LoRA rank (released code: 16).")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (released code: 16).")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout (0 keeps rollout and loss consistent).")
    lora_targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Modules that get LoRA (released trainer: q/k/v/o; drafts add gate/up/down).",
    )

    # -- optimisation ---------------------------------------------------------------------------------------------
    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate (paper: 1e-5).")
    max_steps: int = Field(40, ge=1, description="GRPO iterations = optimizer steps (paper: up to 40 per capability).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip (released code: 1.0).")
    warmup_steps: int = Field(0, ge=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Learning-rate schedule (the paper states none; constant suits short runs)."
    )
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory (the paper used it on A100s).")
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Sequences per forward/backward (per process); None = num_generations. Gradients are "
        "accumulated so that one optimizer step covers all groups of the iteration (released code).",
    )

    # -- GRPO -------------------------------------------------------------------------------------------------------
    num_generations: int = Field(16, ge=2, description="K: rollouts per group, all from one seed (released code: 16).")
    groups_per_step: int = Field(4, ge=1, description="G: groups (seeds) per iteration (released code: 4).")
    temperature: float = Field(1.0, gt=0, description="Rollout temperature (paper: 1.0).")
    top_p: float = Field(1.0, gt=0, le=1.0)
    beta: float = Field(0.0, ge=0.0, description="KL coefficient; 0 loads no reference model (paper: no KL term).")
    epsilon: float = Field(0.2, gt=0, description="Lower clip ε (1 − ε).")
    epsilon_high: float | None = Field(0.28, description="Upper clip (1 + ε_high); released code clips at 0.28 (DAPO).")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field(
        "grpo",
        description="TRL loss: grpo = per-sequence token mean, then batch mean (the paper's formula); dapo is TRL's "
        "default (token mean over the batch).",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Advantage scale: per-group std (paper), batch std (released code), none (Dr. GRPO)."
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="Ratio per token (paper) or per sequence (released code, GSPO-like)."
    )
    num_iterations: int = Field(1, ge=1, description="Optimisation passes per generation batch (on-policy: 1).")

    # -- episodes ---------------------------------------------------------------------------------------------------
    max_turn_tokens: int = Field(256, ge=1, description="New tokens per assistant turn.")
    max_episode_tokens: int = Field(
        2048, ge=8, description="Completion budget per episode: model turns + environment/user tokens between them."
    )
    max_turns: int = Field(8, ge=1, description="Assistant turns per episode; one more needed ends it (max_steps).")
    max_steps_per_episode: int = Field(50, ge=2, description="Orchestrator hops per episode (TRACE used 50).")
    max_errors: int = Field(10, ge=1, description="Tool errors that end an episode (τ²-bench default).")

    # -- groups -----------------------------------------------------------------------------------------------------
    filter_on: Literal["outcome", "reward", "both", "none"] = Field(
        "outcome",
        description="A group is informative when its success labels differ (outcome), its shaped rewards differ "
        "(reward), both, or always (none). Outcome-based filtering keeps shaped-reward noise from faking variance.",
    )
    resample_attempts: int = Field(
        3, ge=0, description="Re-sample new seeds for uninformative groups up to this many times (released code: 3)."
    )
    min_informative_fraction: float = Field(
        0.5, ge=0.0, le=1.0, description="Stop re-sampling once this share of groups is informative (code: G/2)."
    )
    hint_fraction: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Share of each group rolled out with the hinted system prompt, swapped back to the base prompt "
        "before the update (released code: 0.25–0.5). None: the environment's own `hint_fraction` (a synthesized "
        "spec's), else 0; 0 turns hints off (hinted samples are off-policy).",
    )

    # -- seeds and evaluation -----------------------------------------------------------------------------------------
    seed: int = Field(0, description="Trainer seed (sampling, data order).")
    train_seed_start: int = Field(0, ge=0, description="First training seed; rows use consecutive seeds.")
    resample_seed_start: int = Field(500_000, ge=0, description="Seeds for re-sampled groups start here.")
    held_out_seeds: list[int] = Field(
        default_factory=lambda: list(range(1_000_000, 1_000_016)),
        description="Seeds for the before/after evaluation, never used in training.",
    )
    eval_trials: int = Field(2, ge=1, description="Episodes per held-out seed in the before/after evaluation.")
    eval_temperature: float = Field(0.7, ge=0.0, description="Evaluation temperature (released calibration: 0.7).")
    eval: bool = Field(True, description="Evaluate the base model and the adapter on the held-out seeds.")

    # -- machinery ----------------------------------------------------------------------------------------------------
    sampler: Literal["auto", "vllm", "transformers"] = Field(
        "auto",
        description="Who samples the rollouts: vllm (a vLLM server, the adapter re-loaded after every optimizer "
        "step), transformers (the trainer's own model in process), auto (vllm where a vLLM environment exists and "
        "one process trains, else transformers, with a log line saying why; env TRACE_RL_NO_VLLM=1 forces "
        "transformers).",
    )
    shared_prefix: bool = Field(
        True,
        description="Forward each group's shared prompt once per micro-batch, with gradient, instead of once per "
        "rollout (training/shared_prefix.py; the same loss and gradients to float rounding; micro_batch_size "
        "should be a multiple of num_generations). False: TRL's own computation.",
    )
    vllm_server: VLLMServerSettings = Field(
        default_factory=VLLMServerSettings, description="sampler=vllm: how trace-rl starts the server."
    )
    bf16: Literal["auto", "true", "false"] = Field(
        "auto", description="bfloat16 weights/autocast: auto = on CUDA with bf16, or on CPUs with AVX-512-bf16/AMX."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto")
    save_steps: int = Field(5, ge=1, description="Checkpoint every N optimizer steps (resume after a kill).")
    save_total_limit: int = Field(2, ge=1)
    keep_fractions: list[float] | None = Field(
        None,
        description="Keep a copy of the adapter at these fractions of max_steps (step max(1, round(f * max_steps)), "
        "below the last) among the training's kept copies, outside the Trainer's rotation: evaluate's score-vs-budget "
        "curve serves them. None: the run's evaluate.curve.fractions when the curve is on, else none.",
    )
    logging_steps: int = Field(1, ge=1)
    log_trajectories: bool = Field(True, description="Append every rollout (messages, tokens, reward) to a JSONL.")
    num_threads: int | None = Field(None, ge=1, description="torch CPU threads (None: torch's default).")
    per_capability: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Settings for one capability's training only: capability name -> {setting: value} over this "
        "section's, however those were set (e.g. {identify_first: {max_turns: 2}}); each adapter records the "
        "settings it was trained with.",
    )

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.held_out_seeds:
            lo = min(self.held_out_seeds)
            if self.train_seed_start <= lo < self.train_seed_start + self.rows_needed():
                raise ValueError("held_out_seeds overlap the training seeds; move train_seed_start or the held-out set")
        for name, changes in self.per_capability.items():
            unknown = sorted(set(changes) - OWN_SETTINGS)
            if unknown:
                raise ValueError(f"per_capability.{name}: not a train setting: {', '.join(unknown)}")
            try:
                self.for_capability(name)
            except ValidationError as err:
                problem = err.errors()[0]
                where = ".".join(str(p) for p in problem["loc"])
                raise ValueError(f"per_capability.{name}{'.' + where if where else ''}: {problem['msg']}") from None
        return self

    def for_capability(self, name: str) -> TrainConfig:
        """The settings `name`'s adapter trains with: this section with `per_capability[name]` applied (and no
        per-capability table of its own)."""
        changes = self.per_capability.get(name)
        if not changes:
            return self
        return TrainConfig.model_validate({**self.model_dump(), **changes, "per_capability": {}})

    @field_validator("keep_fractions")
    @classmethod
    def _keep_fractions(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and any(not 0 < f < 1 for f in value):
            raise ValueError("keep_fractions must lie strictly between 0 and 1")
        return value

    def kept_steps(self) -> list[int]:
        """The optimizer steps whose adapter is kept (`keep_fractions`)."""
        return steps_at_fractions(self.max_steps, self.keep_fractions or [])

    def save_interval(self) -> int:
        """Trainer checkpoint interval: `save_steps`, or its gcd with the kept steps so each of them is saved."""
        return math.gcd(self.save_steps, *self.kept_steps())

    def rows_needed(self) -> int:
        """Dataset rows (one per seed): one fresh seed per group of every iteration."""
        return self.max_steps * self.groups_per_step

    def micro(self) -> int:
        return self.micro_batch_size or self.num_generations


OWN_SETTINGS = set(TrainConfig.model_fields) - {"per_capability"}  # what a capability's entry may set
OLD_SAMPLERS = {"hf": "transformers"}  # values older runs recorded for `sampler`


def recorded_train_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """A train section as a run recorded it (manifest, an adapter's train_config.json), with the values since renamed
    mapped to today's, so an older run's record still validates."""
    out = dict(data)
    if out.get("sampler") in OLD_SAMPLERS:
        out["sampler"] = OLD_SAMPLERS[out["sampler"]]
    return out
