"""`trace-rl rollout`: the typer command (registered by cli/app.py). It maps its flags onto the `env`, `rollout` and
`executor` sections of `--config` (or the defaults) and calls the rollout stage (`rollout/stage.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, get_args

import typer

from trace_rl.artifacts.store import RunDir
from trace_rl.config import load_config
from trace_rl.errors import UserError
from trace_rl.stage import ProgressMode, StageContext, command_line, run_stage

MODEL_HELP = (
    "a config model name, scripted, tiny, smollm2-135m, local:<path>, openai:<model>@<base_url> "
    "(or openai:<model> with OPENAI_BASE_URL), or a model YAML file (a `models` entry)"
)
PROGRESS_MODES = get_args(ProgressMode)


def rollout_command(
    ctx: typer.Context,
    env: Annotated[
        str | None, typer.Option("--env", help="tau2:retail | tau2:airline | tau2:mock | library | ...")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Task split (default train).")] = None,
    trials: Annotated[
        int | None, typer.Option("--trials", "-k", help="Trials per task (pass^k needs k ≤ trials).")
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help=f"Policy: {MODEL_HELP}.")] = None,
    adapter: Annotated[
        str | None, typer.Option("--adapter", help="LoRA adapter name (vLLM: the request's model).")
    ] = None,
    user_model: Annotated[
        str | None, typer.Option("--user-model", help="LLM user simulator model (default: the domain's scripted user).")
    ] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Model grading NL assertions.")] = None,
    run: Annotated[Path | None, typer.Option("--run", help="Run directory, e.g. runs/demo.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (one section per stage).")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-j", help="Episodes in flight.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Base seed; trial seeds derive from it.")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only this task id (repeatable).")] = None,
    task_limit: Annotated[int | None, typer.Option("--task-limit", help="Only the first N tasks.")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Policy sampling temperature.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Policy max tokens per turn.")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Orchestrator steps per episode.")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="τ² data directory (or TRACE_TAU2_DATA).")] = None,
    task_set: Annotated[str | None, typer.Option("--task-set", help="τ² task file: head or v0.2.")] = None,
    progress: Annotated[str, typer.Option("--progress", help="auto | rich | plain | none")] = "auto",
    executor: Annotated[
        str | None, typer.Option("--executor", help="local | ray: where episodes and trainings run (config: executor).")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster: auto or ray://host:10001 (default: start a local one)."),
    ] = None,
) -> None:
    """Run every task of a split K times; resumable (rerun the same command to finish and retry infra failures)."""
    from trace_rl.models.specs import add_model_spec
    from trace_rl.rollout.stage import ROLLOUT

    if progress not in PROGRESS_MODES:
        raise UserError(f"--progress: '{progress}' is not one of {', '.join(PROGRESS_MODES)}")
    cfg = load_config(
        config,
        {
            "env.name": env,
            "env.data_dir": str(data_dir) if data_dir else None,
            "env.task_set": task_set,
            "env.max_steps": max_steps,
            "rollout.split": split,
            "rollout.trials": trials,
            "rollout.adapter": adapter,
            "rollout.concurrency": concurrency,
            "rollout.seed": seed,
            "rollout.task_ids": task or None,
            "rollout.task_limit": task_limit,
            "rollout.temperature": temperature,
            "rollout.max_tokens": max_tokens,
            "executor.kind": executor,
            "executor.address": ray_address,
        },
    )
    if model is not None:
        cfg.rollout.policy = add_model_spec(cfg, model)
    if user_model is not None:
        cfg.rollout.user = add_model_spec(cfg, user_model)
    if judge_model is not None:
        cfg.rollout.judge = add_model_spec(cfg, judge_model)
    run_dir = RunDir(run if run is not None else cfg.run.runs_dir / cfg.run.name)
    stage_ctx = StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo, progress=progress)  # type: ignore[arg-type]
    run_stage(ROLLOUT, stage_ctx)


__all__ = ["rollout_command"]
