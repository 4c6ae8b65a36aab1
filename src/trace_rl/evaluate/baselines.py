"""Training baselines at TRACE's rollout budget: GRPO directly on the target's train split, and the multi-capability
adapter (one LoRA on a uniform mix of all capability environments; TRACE Table 3).

Both use the capability adapters' own `TrainConfig` (the same trainer, G, K, lengths, learning rate) with
`max_steps = round(total / (G·K))`, so their nominal rollout budget equals the sum over the capability adapters
(TRACE §4.1–4.2: "the same total number of training iterations as the sum of training all capabilities separately").
Differences from the capability adapters, all recorded: no before/after evaluation (every arm is evaluated on the
test split instead); checkpoints at the curve fractions are kept for the score-vs-budget points.

GRPO on target (the paper does not say on which tasks): the target's *train* split, a seed `s` playing train task
`s mod n`; the test split is never trained on. Layout:

    evaluate/grpo_target/adapter/        PEFT adapter + train_config.json + metrics.jsonl + done.json
    evaluate/grpo_target/train/          checkpoints (resume), trajectories.jsonl (the budget count),
                                         kept/step-N/ (adapter copies at the curve steps; runs before 2026-12-07
                                         kept them in evaluate/grpo_target/checkpoints/step-N/)
    adapters/multi/, train/multi/        the multi-capability adapter (the train stage's `--mix` layout)

Training goes through `training.launcher`: in a spawned child process with the default backend (the trainer's memory
goes back to the system before the evaluation continues), in process with an injected backend (tests).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.artifacts.adapters import BaselineRecord, is_done, read_train_record, write_baseline
from trace_rl.artifacts.layout import GRPO_TARGET_DIR, AdapterLayout
from trace_rl.config.train import TrainConfig, recorded_train_config
from trace_rl.errors import UserError
from trace_rl.evaluate.budget import matched_steps
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext
from trace_rl.training.envs import MixTrainEnv, task_list_env
from trace_rl.training.launcher import AdapterJob, InlineLauncher, Launcher, SpawnedLauncher, TrainingFailed
from trace_rl.training.protocol import TrainEnv
from trace_rl.training.selection import run_mix_env
from trace_rl.types import Task


def base_train_config(ctx: EvalContext, adapters: dict[str, Path]) -> TrainConfig:
    """The capability adapters' TrainConfig (the first readable one), else defaults on the policy's base model; then
    the evaluate config's `train` overrides."""
    data: dict[str, Any] = {}
    for folder in adapters.values():
        record = read_train_record(AdapterLayout(folder))
        data = recorded_train_config(record.config) if record is not None else {}
        if data:
            break
    if not data and ctx.policy_cfg is not None and ctx.policy_cfg.model:
        data = {"model": ctx.policy_cfg.model}
    data.update(ctx.ecfg.train)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"baseline train config: {str(exc).splitlines()[0]}") from None


def matched_config(ctx: EvalContext, adapters: dict[str, Path], total: int) -> TrainConfig:
    """TrainConfig for a baseline at `total` rollouts: steps matched, no before/after eval, the adapter kept at the
    score-vs-budget curve's fractions when the curve is on."""
    base = base_train_config(ctx, adapters)
    steps = matched_steps(total, base.num_generations, base.groups_per_step)
    keep = list(ctx.ecfg.curve.fractions) if ctx.ecfg.curve.enabled else []
    return base.model_copy(update={"max_steps": steps, "eval": False, "keep_fractions": keep})


def target_train_env(ctx: EvalContext, name: str = GRPO_TARGET_DIR) -> TrainEnv:
    """The target's train split as a `TrainEnv`, checked: it has tasks, each with a scripted user to train with."""
    tasks: list[Task] = ctx.train_tasks()
    if not tasks:
        raise ArmSkipped(f"{ctx.env_name}: the train split has no tasks to train GRPO on")
    unscripted = [t.id for t in tasks if ctx.domain.scripted_user(t) is None]
    if unscripted:
        raise ArmSkipped(f"{ctx.env_name}/train: {len(unscripted)} tasks have no scripted user to train with")
    return task_list_env(name, ctx.domain, tasks)


def mix_env(ctx: EvalContext) -> MixTrainEnv:
    """The run's calibrated capability environments mixed (`run_mix_env`); no environment to mix skips the arm."""
    try:
        return run_mix_env(ctx.run.root)
    except UserError as exc:
        raise ArmSkipped(str(exc)) from None


def train_baseline(
    ctx: EvalContext,
    env: TrainEnv,
    tcfg: TrainConfig,
    adapter_dir: Path,
    work_dir: Path,
    *,
    recipe: Callable[[], TrainEnv],
) -> None:
    """Train one baseline adapter (resuming from its newest checkpoint), unless it is finished.

    With the default backend the training runs in a spawned child process that builds its environment with `recipe`
    (picklable); an injected backend (tests) trains in process on `env`."""
    if is_done(adapter_dir):
        return
    ctx.echo(
        f"training baseline '{env.name}': {tcfg.max_steps} steps × G={tcfg.groups_per_step} × "
        f"K={tcfg.num_generations} -> {adapter_dir}"
    )
    launcher: Launcher = InlineLauncher(env, ctx.backend) if ctx.backend is not None else SpawnedLauncher(recipe)
    try:
        launcher.launch(AdapterJob(name=env.name, cfg=tcfg, adapter_dir=adapter_dir, work_dir=work_dir))
    except TrainingFailed as exc:
        raise ArmSkipped(
            f"training the '{env.name}' baseline failed (exit code {exc.exit_code}; its log is "
            "above); rerun to resume from its last checkpoint"
        ) from None
    record = BaselineRecord(name=env.name, max_steps=tcfg.max_steps, keep_steps=tcfg.kept_steps())
    write_baseline(AdapterLayout(adapter_dir), record)


__all__ = [
    "base_train_config",
    "matched_config",
    "mix_env",
    "target_train_env",
    "train_baseline",
]
