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
from trace_rl.artifacts.store import atomic_write_json
from trace_rl.types import Task

GRPO_DIR = "grpo_target"
MIX_NAME = "multi"
KEEP_FILES = ("adapter_model.safetensors", "adapter_config.json")


def base_train_config(ctx: EvalContext, adapters: dict[str, Path]) -> Any:
    """The capability adapters' TrainConfig (the first readable one), else defaults on the policy's base model; then
    the evaluate config's `train` overrides."""
    from trace_rl.config.train import TrainConfig

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


def target_env_of(name: str, domain: Any, tasks: list[Task]) -> Any:
    """A `TrainEnv` over `tasks` (the target's train split): seed s plays task s mod n."""
    from trace_rl.training.envs import DomainTrainEnv

    return DomainTrainEnv(name, domain, lambda seed: tasks[seed % len(tasks)], train_seeds=list(range(len(tasks))))


def target_train_env(ctx: EvalContext, name: str = GRPO_DIR) -> Any:
    """The target's train split as a `TrainEnv`, checked: it has tasks, each with a scripted user to train with."""
    tasks: list[Task] = ctx.train_tasks()
    if not tasks:
        raise ArmSkipped(f"{ctx.env_name}: the train split has no tasks to train GRPO on")
    unscripted = [t.id for t in tasks if ctx.domain.scripted_user(t) is None]
    if unscripted:
        raise ArmSkipped(f"{ctx.env_name}/train: {len(unscripted)} tasks have no scripted user to train with")
    return target_env_of(name, ctx.domain, tasks)


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


def rebuild_env(spec: dict[str, Any]) -> Any:
    """The training environment described by `spec` (in a fresh process): the target's train split or the mix."""
    if spec["kind"] == "target":
        from trace_rl.config import EnvConfig
        from trace_rl.envs.registry import load_domain

        env_cfg = EnvConfig.model_validate(spec["env"])
        domain = load_domain(env_cfg.name, env_cfg)
        return target_env_of(spec["name"], domain, domain.tasks("train"))
    from trace_rl.artifacts.store import RunDir

    return mix_env_of(RunDir(Path(spec["run"])))


def _train_child(job: dict[str, Any]) -> None:
    """Entry point of the training process (spawned: its memory is returned to the system when it ends)."""
    from trace_rl.config.train import TrainConfig
    from trace_rl.training.trl_backend import TRLBackend

    keep_dir = Path(job["keep_dir"]) if job.get("keep_dir") else None
    callbacks = [checkpoint_keeper(keep_dir, job["keep"])] if keep_dir is not None and job["keep"] else []
    TRLBackend(callbacks=callbacks).train(
        rebuild_env(job["env"]), TrainConfig.model_validate(job["train"]),
        adapter_dir=Path(job["adapter_dir"]), work_dir=Path(job["work_dir"]),
    )  # fmt: skip


def train_baseline(
    ctx: EvalContext, env: Any, tcfg: Any, adapter_dir: Path, work_dir: Path, *, rebuild: dict[str, Any],
    keep_dir: Path | None = None, keep: list[int] | None = None,
) -> None:  # fmt: skip
    """Train one baseline adapter (resuming from its newest checkpoint).

    With the default TRL backend the training runs in a spawned child process (`rebuild` describes its environment),
    so the trainer's memory (GRPO on full-vocabulary logits peaks at many GB) goes back to the system before the
    evaluation continues; an injected backend (tests) trains in process on `env`."""
    from trace_rl.training.trl_backend import is_done

    if is_done(adapter_dir):
        return
    ctx.echo(f"training baseline '{env.name}': {tcfg.max_steps} steps × G={tcfg.groups_per_step} × "
             f"K={tcfg.num_generations} -> {adapter_dir}")  # fmt: skip
    if ctx.backend is not None:
        ctx.backend.train(env, tcfg, adapter_dir=adapter_dir, work_dir=work_dir)
    else:
        if tcfg.backend != "trl":
            raise UserError(f"unknown training backend '{tcfg.backend}'")
        import multiprocessing

        job = {
            "env": rebuild, "train": tcfg.model_dump(mode="json"), "adapter_dir": str(adapter_dir),
            "work_dir": str(work_dir), "keep_dir": str(keep_dir) if keep_dir else None, "keep": keep or [],
        }  # fmt: skip
        proc = multiprocessing.get_context("spawn").Process(target=_train_child, args=(job,), name=f"train-{env.name}")
        proc.start()
        try:
            proc.join()
        except BaseException:
            proc.terminate()
            proc.join()
            raise
        if proc.exitcode != 0 or not is_done(adapter_dir):
            raise ArmSkipped(f"training the '{env.name}' baseline failed (exit code {proc.exitcode}; its log is "
                             "above); rerun to resume from its last checkpoint")  # fmt: skip
    atomic_write_json(adapter_dir / "baseline.json", {"name": env.name, "max_steps": tcfg.max_steps,
                                                      "keep_steps": keep or []})  # fmt: skip


def mix_env_of(run: Any) -> Any:
    """A uniform mix of the run's calibrated capability environments (the train stage's `--mix`); UserError if none."""
    from trace_rl.training.envs import MixTrainEnv
    from trace_rl.train.stage import select_envs

    chosen, skipped = select_envs(run)
    if not chosen:
        why = ", ".join(f"{n}: {s}" for n, s in skipped) or "no envs/ folder"
        raise UserError(f"no calibrated capability environment to mix ({why})")
    return MixTrainEnv(MIX_NAME, list(chosen.values()))


def mix_env(ctx: EvalContext) -> Any:
    """`mix_env_of` for an arm: no environment to mix skips the arm."""
    try:
        return mix_env_of(ctx.run)
    except UserError as exc:
        raise ArmSkipped(str(exc)) from None


__all__ = [
    "GRPO_DIR",
    "MIX_NAME",
    "base_train_config",
    "checkpoint_keeper",
    "curve_steps",
    "kept_checkpoints",
    "matched_config",
    "mix_env",
    "mix_env_of",
    "rebuild_env",
    "target_env_of",
    "target_train_env",
    "train_baseline",
]
