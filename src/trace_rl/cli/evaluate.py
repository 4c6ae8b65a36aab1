"""`trace-rl evaluate --run runs/<name>`: the routed agent against the base and the paper's baselines on the target's
held-out split (registered by cli/app.py).

    trace-rl evaluate --run runs/demo --split test --trials 3                 # every arm
    trace-rl evaluate --run runs/demo --arms base,trace --trials 3            # the cheap ones first
    trace-rl evaluate --run runs/demo --arms gepa --gepa-budget 200           # GEPA alone, an explicit budget
    trace-rl evaluate --run runs/demo --arms trace_guarded                    # TRACE with the held-in guard (ours)
    trace-rl evaluate --run runs/demo --split train --out train               # beside evaluate/, in evaluate@train/

Rerunning the same command resumes: only missing episodes run. The command maps its flags onto the `evaluate` section
(`EvaluateConfig`) of `--config`, else of the run's recorded config, and calls the evaluate stage (`evaluate/stage.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.store import RunDir
from trace_rl.config import executor_with
from trace_rl.config.evaluate import ARMS
from trace_rl.stage import StageContext, command_line, load_run_config, run_stage


def evaluate_command(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    split: Annotated[str | None, typer.Option("--split", help="Held-out target split (default test).")] = None,
    out: Annotated[
        str | None,
        typer.Option("--out", help="Evaluate into evaluate@<OUT>/ (another split or test range beside evaluate/)."),
    ] = None,
    trials: Annotated[int | None, typer.Option("--trials", "-k", help="Trials per task (pass^1..pass^k).")] = None,
    arms: Annotated[
        str | None,
        typer.Option("--arms", help=f"Comma-separated, of {','.join(ARMS)} (default: all but trace_guarded)."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (default: the run's).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Base policy model (config name or spec).")] = None,
    user_model: Annotated[
        str | None, typer.Option("--user-model", help="User simulator (default: the run's rollout user).")
    ] = None,
    task_limit: Annotated[int | None, typer.Option("--task-limit", help="Only the first N tasks.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-j", help="Episodes in flight.")] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Base seed of the trial seeds (same for every arm).")
    ] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", help="Training rollouts to match (default: sum over the adapters).")
    ] = None,
    gepa_budget: Annotated[int | None, typer.Option("--gepa-budget", help="GEPA max_metric_calls in rollouts.")] = None,
    reflection_model: Annotated[
        str | None, typer.Option("--reflection-model", help="GEPA reflection LM (default: the base model).")
    ] = None,
    no_train: Annotated[
        bool, typer.Option("--no-train", help="Do not train missing baseline adapters; skip those arms.")
    ] = False,
    no_curve: Annotated[bool, typer.Option("--no-curve", help="Skip the score-vs-budget points.")] = False,
    select: Annotated[
        str | None, typer.Option("--single-best-select", help="train | train_eval | test (how to pick it).")
    ] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local | ray: where the episodes run (config: executor).")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster: auto or ray://host:10001 (default: local).")
    ] = None,
) -> None:
    """Compare base, TRACE and the paper's baselines on held-out tasks (stage 5)."""
    from trace_rl.evaluate.stage import EVALUATE

    run_dir = RunDir(run)
    run_dir.require("run the earlier stages first")
    overrides = {
        "evaluate.split": split,
        "evaluate.out": out,
        "evaluate.trials": trials,
        "evaluate.policy": model,
        "evaluate.user": user_model,
        "evaluate.task_limit": task_limit,
        "evaluate.concurrency": concurrency,
        "evaluate.seed": seed,
        "evaluate.budget": budget,
        "evaluate.gepa.budget": gepa_budget,
        "evaluate.gepa.reflection_model": reflection_model,
        "evaluate.single_best.select": select,
        "evaluate.arms": [a.strip() for a in arms.split(",") if a.strip()] if arms else None,
        "evaluate.train_baselines": False if no_train else None,
        "evaluate.curve.enabled": False if no_curve else None,
    }
    cfg = load_run_config(run_dir, config, overrides)
    cfg.executor = executor_with(cfg.executor, executor, ray_address)
    run_stage(EVALUATE, StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo))


__all__ = ["evaluate_command"]
