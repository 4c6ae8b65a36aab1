"""Training baselines at TRACE's rollout budget: GRPO directly on the target's train split, and the multi-capability
adapter (one LoRA on a uniform mix of all capability environments; TRACE Table 3).

Both use the capability adapters' own `TrainConfig` (the same trainer, G, K, lengths, learning rate) with
`max_steps = round(total / (G·K))`, so their nominal rollout budget equals the sum over the capability adapters
(TRACE §8: "the same total number of training iterations as the sum of training all capabilities separately").
Differences from the capability adapters, all recorded: no before/after evaluation (every arm is evaluated on the
test split instead); checkpoints at the curve fractions are kept for the score-vs-budget points.

GRPO on target (trace-method §11.6: the paper does not say on which tasks): the target's *train* split, a seed `s`
playing train task `s mod n`; the test split is never trained on. Layout:

    evaluate/grpo_target/adapter/        PEFT adapter + train_config.json + metrics.jsonl + done.json
    evaluate/grpo_target/train/          checkpoints (resume), trajectories.jsonl (the budget count)
    evaluate/grpo_target/checkpoints/step-N/   adapter copies at the curve steps
    adapters/multi/, train/multi/        the multi-capability adapter (the train stage's `--mix` layout)
"""

from __future__ import annotations

import json
import math
import shutil
from functools import reduce
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trace_rl.errors import UserError
from trace_rl.evaluate.budget import matched_steps
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext
from trace_rl.store import atomic_write_json
from trace_rl.types import Task

GRPO_DIR = "grpo_target"
MIX_NAME = "multi"
KEEP_FILES = ("adapter_model.safetensors", "adapter_config.json")


def base_train_config(ctx: EvalContext, adapters: dict[str, Path]) -> Any:
    """The capability adapters' TrainConfig (the first readable one), else defaults on the policy's base model; then
    the evaluate config's `train` overrides."""
    from trace_rl.train.config import TrainConfig

    data: dict[str, Any] = {}
    for folder in adapters.values():
        try:
            data = json.loads((folder / "train_config.json").read_text()).get("config") or {}
        except (OSError, json.JSONDecodeError):
            continue
        if data:
            break
    if not data and ctx.policy_cfg is not None and ctx.policy_cfg.model:
        data = {"model": ctx.policy_cfg.model}
    data.update(ctx.ecfg.train)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"baseline train config: {str(exc).splitlines()[0]}") from None


def curve_steps(steps: int, fractions: list[float]) -> list[int]:
    """Optimizer steps at the curve fractions (distinct, below the last step)."""
    return sorted({max(1, round(f * steps)) for f in fractions} - {steps})


def matched_config(ctx: EvalContext, adapters: dict[str, Path], total: int, keep: list[int] | None = None) -> Any:
    """TrainConfig for a baseline at `total` rollouts: steps matched, no before/after eval, checkpoints on `keep`."""
    base = base_train_config(ctx, adapters)
    steps = matched_steps(total, base.num_generations, base.groups_per_step)
    update: dict[str, Any] = {"max_steps": steps, "eval": False}
    wanted = [s for s in (keep or []) if 0 < s < steps]
    if wanted:
        update["save_steps"] = reduce(math.gcd, [*wanted, steps])
    return base.model_copy(update=update)


def target_train_env(ctx: EvalContext, name: str = GRPO_DIR) -> Any:
    """The target's train split as a `TrainEnv`: seed s plays train task s mod n."""
    from trace_rl.train.envs import DomainTrainEnv

    tasks: list[Task] = ctx.train_tasks()
    if not tasks:
        raise ArmSkipped(f"{ctx.env_name}: the train split has no tasks to train GRPO on")
    unscripted = [t.id for t in tasks if ctx.domain.scripted_user(t) is None]
    if unscripted:
        raise ArmSkipped(f"{ctx.env_name}/train: {len(unscripted)} tasks have no scripted user to train with")
    return DomainTrainEnv(name, ctx.domain, lambda seed: tasks[seed % len(tasks)], train_seeds=list(range(len(tasks))))


def checkpoint_keeper(keep_dir: Path, steps: list[int]) -> Any:
    """A transformers callback copying the adapter of each wanted checkpoint to `keep_dir/step-N/`."""
    from transformers import TrainerCallback

    wanted = set(steps)

    class CheckpointKeeper(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step = int(state.global_step)
            if step not in wanted or not state.is_world_process_zero:
                return
            source = Path(args.output_dir) / f"checkpoint-{step}"
            target = keep_dir / f"step-{step}"
            if not (source / KEEP_FILES[0]).is_file():
                return
            tmp = keep_dir / f".step-{step}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            for name in KEEP_FILES:
                shutil.copy2(source / name, tmp / name)
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)

    return CheckpointKeeper()


def kept_checkpoints(keep_dir: Path) -> dict[int, Path]:
    """step -> adapter folder of the kept checkpoints."""
    out = {}
    if keep_dir.is_dir():
        for folder in keep_dir.iterdir():
            if folder.name.startswith("step-") and (folder / KEEP_FILES[1]).is_file():
                out[int(folder.name.split("-", 1)[1])] = folder
    return dict(sorted(out.items()))


def train_baseline(
    ctx: EvalContext, env: Any, tcfg: Any, adapter_dir: Path, work_dir: Path, *, keep_dir: Path | None = None,
    keep: list[int] | None = None,
) -> Any:  # fmt: skip
    """Train one baseline adapter (resuming from its newest checkpoint) with the run's trainer backend."""
    from trace_rl.train.trl_backend import TRLBackend, is_done

    if is_done(adapter_dir):
        return None
    backend = ctx.backend
    if backend is None:
        if tcfg.backend != "trl":
            raise UserError(f"unknown training backend '{tcfg.backend}'")
        callbacks = [checkpoint_keeper(keep_dir, keep)] if keep_dir is not None and keep else []
        backend = TRLBackend(callbacks=callbacks)
    ctx.echo(f"training baseline '{env.name}': {tcfg.max_steps} steps × G={tcfg.groups_per_step} × "
             f"K={tcfg.num_generations} -> {adapter_dir}")  # fmt: skip
    result = backend.train(env, tcfg, adapter_dir=adapter_dir, work_dir=work_dir)
    atomic_write_json(adapter_dir / "baseline.json", {"name": env.name, "max_steps": tcfg.max_steps,
                                                      "keep_steps": keep or []})  # fmt: skip
    return result


def mix_env(ctx: EvalContext) -> Any:
    """A uniform mix of the run's calibrated capability environments (the train stage's `--mix`)."""
    from trace_rl.train.envs import MixTrainEnv
    from trace_rl.train.stage import select_envs

    try:
        chosen, skipped = select_envs(ctx.run)
    except UserError as exc:
        raise ArmSkipped(str(exc)) from None
    if not chosen:
        why = ", ".join(f"{n}: {s}" for n, s in skipped) or "no envs/ folder"
        raise ArmSkipped(f"no calibrated capability environment to mix ({why})")
    return MixTrainEnv(MIX_NAME, list(chosen.values()))


__all__ = [
    "GRPO_DIR",
    "MIX_NAME",
    "base_train_config",
    "checkpoint_keeper",
    "curve_steps",
    "kept_checkpoints",
    "matched_config",
    "mix_env",
    "target_train_env",
    "train_baseline",
]
