"""`TRLBackend`: one LoRA adapter per capability with TRL's GRPOTrainer fed by trace-rl's multi-turn episode loop.

What is implemented from TRACE (paper §3.4): a LoRA Δ_c per capability on a frozen base; each iteration samples G
groups of K trajectories that share a seed; advantage `(r − mean_g) / (std_g + ε)` with every token of a rollout getting
its trajectory's advantage; constant groups dropped; PPO-style clipped loss averaged per sequence then over the batch
(`loss_type="grpo"`); no KL (`beta=0`); one optimizer step per iteration (gradient accumulation over the G·K rollouts);
rollouts on-policy from the adapter being trained.

Where it departs, and the switch for the other behaviour:
- advantage scale: per-group std (paper) by default; the released code's batch std is `scale_rewards="batch"`;
  TRL adds 1e-4 to the std, not the paper's unspecified ε;
- ratio: per token (paper); the released code's per-sequence ratio is `importance_sampling_level="sequence"`;
- clip: ε = 0.2 below, 0.28 above (the code's DAPO clip), `epsilon` / `epsilon_high`;
- unit of a sample: the whole multi-turn trajectory with environment tokens masked (paper), not the code's per-turn
  samples;
- group filtering on the success label by default and dynamic re-sampling (released code), see `grouping.py`;
- hints (released code) only with `hint_fraction > 0` or an environment that sets its own fraction.

Generation uses the trainer's own PEFT model through `sampler.HFSampler` (CPU or GPU); the vLLM seam is documented in
`sampler.py`. One process or several via `accelerate launch -m trace_rl.train ...` (G must be a multiple of the
process count, so that no group is split across processes).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.artifacts.store import JsonlStore, atomic_write_json
from trace_rl.training.checkpoints import last_complete_checkpoint
from trace_rl.config.train import TrainConfig
from trace_rl.engine.tokens import ChatCodec, EpisodeLimits, EpisodeRunner, check_prefix_preserving
from trace_rl.training.grouping import GroupPlan, SeedTable
from trace_rl.training.protocol import AdapterResult, TrainEnv
from trace_rl.training.rollout_func import GroupRollout, env_reward, seed_rows
from trace_rl.engine.sampler import HFSampler, TurnSampler

DONE_FILE = "done.json"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


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


def grpo_args(cfg: TrainConfig, output_dir: Path, *, device: str, bf16: bool) -> Any:
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
        report_to="none",
        save_strategy="steps",
        save_steps=cfg.save_steps,
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


def is_done(adapter_dir: Path) -> bool:
    """A finished adapter: the weights and the done marker exist."""
    return (adapter_dir / ADAPTER_FILES[0]).is_file() and (adapter_dir / DONE_FILE).is_file()


def save_adapter(model: Any, adapter_dir: Path) -> None:
    """PEFT `save_pretrained` into a temp folder, then each file renamed into place (a kill leaves old or new)."""
    tmp = adapter_dir / ".saving"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    for item in tmp.iterdir():
        os.replace(item, adapter_dir / item.name)
    shutil.rmtree(tmp, ignore_errors=True)


class TRLBackend:
    """`TrainerBackend` over TRL's GRPOTrainer + PEFT LoRA."""

    name = "trl"

    def __init__(
        self,
        *,
        sampler_for: Callable[[Any], TurnSampler] | None = None,
        callbacks: list[Any] | None = None,
        on_trainer: Callable[[Any], None] | None = None,
    ) -> None:
        self._sampler_for = sampler_for
        self._callbacks = list(callbacks or [])
        self._on_trainer = on_trainer

    def train(self, env: TrainEnv, cfg: TrainConfig, *, adapter_dir: Path, work_dir: Path) -> AdapterResult:
        import torch
        from trl import GRPOTrainer

        from trace_rl.training.evaluate_adapter import evaluate_policy, plot_before_after
        from trace_rl.training.metrics import MetricsCallback, plot_training

        started = time.time()
        adapter_dir, work_dir = Path(adapter_dir), Path(work_dir)
        if is_done(adapter_dir):
            return AdapterResult(capability=env.name, adapter_dir=adapter_dir, skipped=True)
        adapter_dir.mkdir(parents=True, exist_ok=True)
        work_dir.mkdir(parents=True, exist_ok=True)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        device = resolve_device(cfg)
        bf16 = resolve_bf16(cfg, device)
        quiet_dropped_group_warnings()
        model, tokenizer, model_path = load_policy(cfg, device, bf16)
        codec = ChatCodec(tokenizer)
        check_prefix_preserving(codec)
        limits = limits_of(cfg)
        dataset, table, data_info = build_dataset(env, cfg, limits)

        runner = EpisodeRunner(env, codec, limits, temperature=cfg.temperature, top_p=cfg.top_p)
        plan = GroupPlan(
            k=cfg.num_generations,
            filter_on=cfg.filter_on,
            resample_attempts=cfg.resample_attempts,
            min_informative_fraction=cfg.min_informative_fraction,
            hint_fraction=hint_fraction(env, cfg),
            resample_seed_start=getattr(env, "resample_seed_start", None) or cfg.resample_seed_start,
        )
        main = int(os.environ.get("RANK", "0")) == 0
        rollout = GroupRollout(
            env,
            runner,
            plan,
            table,
            self._sampler_for or hf_sampler_for(tokenizer),
            trajectories=JsonlStore(work_dir / "trajectories.jsonl") if cfg.log_trajectories and main else None,
        )
        metrics = MetricsCallback(adapter_dir / "metrics.jsonl", rollout, capability=env.name)
        args = grpo_args(cfg, work_dir / "checkpoints", device=device, bf16=bf16)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[env_reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(cfg, model),
            rollout_func=rollout,
            callbacks=[metrics, *self._callbacks],
        )
        if self._on_trainer is not None:
            self._on_trainer(trainer)
        is_main = trainer.accelerator.is_main_process
        micro, accumulation = batch_layout(cfg, trainer.accelerator.num_processes)
        config_record = {
            "config": cfg.model_dump(mode="json"),
            "capability": env.name,
            "model_path": str(model_path),
            "device": device,
            "bf16": bf16,
            "world_size": trainer.accelerator.num_processes,
            "batch": {"micro": micro, "accumulation": accumulation, "groups": cfg.groups_per_step},
            "dataset": data_info,
            "backend": self.name,
            "sampler": cfg.sampler,
            "hint_fraction": plan.hint_fraction,
        }
        if is_main:
            atomic_write_json(adapter_dir / "train_config.json", config_record)

        held_out = held_out_seeds(env, cfg)
        eval_runner = EpisodeRunner(env, codec, limits, temperature=cfg.eval_temperature, top_p=1.0)
        before = _load_json(adapter_dir / "eval_before.json")
        if cfg.eval and is_main and before is None and held_out:
            before, episodes = evaluate_policy(
                eval_runner, trainer.model, tokenizer, held_out, trials=cfg.eval_trials, label="base",
                use_adapter=False,
            )  # fmt: skip
            _write_episodes(work_dir / "eval_before.jsonl", env.name, episodes)
            atomic_write_json(adapter_dir / "eval_before.json", before)
        trainer.accelerator.wait_for_everyone()

        last = last_complete_checkpoint(work_dir / "checkpoints")  # a kill mid-save leaves a torn newest one
        trainer.train(resume_from_checkpoint=last)
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        after = None
        if is_main:
            save_adapter(unwrapped, adapter_dir)
            if cfg.eval and held_out:
                after, episodes = evaluate_policy(
                    eval_runner, unwrapped, tokenizer, held_out, trials=cfg.eval_trials, label="adapter",
                    use_adapter=True,
                )  # fmt: skip
                _write_episodes(work_dir / "eval_after.jsonl", env.name, episodes)
                atomic_write_json(adapter_dir / "eval_after.json", after)
                if before is not None and _has_matplotlib():
                    plot_before_after(before, after, adapter_dir / "eval.png", title=f"{env.name}: base vs adapter")
            if _has_matplotlib():
                plot_training(adapter_dir / "metrics.jsonl", adapter_dir / "training.png", title=f"{env.name}: GRPO")
        summary = {
            "steps": trainer.state.global_step,
            "resumed_from": last,
            "wall_s": time.time() - started,
            "eval_before": _headline(before),
            "eval_after": _headline(after),
        }
        if is_main:
            atomic_write_json(adapter_dir / DONE_FILE, {"capability": env.name, "finished_at": time.time(), **summary})
        trainer.accelerator.wait_for_everyone()
        return AdapterResult(
            capability=env.name,
            adapter_dir=adapter_dir,
            steps=trainer.state.global_step,
            resumed_from=last,
            wall_s=summary["wall_s"],
            eval_before=before,
            eval_after=after,
            summary=summary,
        )


def _has_matplotlib() -> bool:
    """Figures need the `report` extra; without it the numbers are still written."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _headline(summary: dict[str, Any] | None) -> dict[str, float] | None:
    if summary is None:
        return None
    keys = ("mean_reward", "success_rate", "episodes", "gold_call_logprob")
    return {k: summary[k] for k in keys if k in summary}


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_episodes(path: Path, env_name: str, episodes: list[Any]) -> None:
    store = JsonlStore(path)
    store.append(
        [ep.trajectory(env=env_name, split="held_out", trial=i, capability=env_name) for i, ep in enumerate(episodes)]
    )
