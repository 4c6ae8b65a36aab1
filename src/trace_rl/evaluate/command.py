"""`trace-rl evaluate --run runs/<name>`: the routed agent against the base and the paper's baselines on the target's
held-out split (registered by cli.py).

    trace-rl evaluate --run runs/demo --split test --trials 3                 # every arm
    trace-rl evaluate --run runs/demo --arms base,trace --trials 3            # the cheap ones first
    trace-rl evaluate --run runs/demo --arms gepa --gepa-budget 200           # GEPA alone, an explicit budget

Rerunning the same command resumes: only missing episodes run. The config is `--config` when given, else the run's
recorded one; `stages.evaluate` (`EvaluateConfig`) is overridden by the flags.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trace_rl.errors import UserError
from trace_rl.artifacts.store import RunDir


def evaluate_command(
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    split: Annotated[str | None, typer.Option("--split", help="Held-out target split (default test).")] = None,
    trials: Annotated[int | None, typer.Option("--trials", "-k", help="Trials per task (pass^1..pass^k).")] = None,
    arms: Annotated[
        str | None,
        typer.Option("--arms", help="Comma-separated: base,trace,grpo_target,gepa,single_best,multi_capability."),
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
    from trace_rl.config.evaluate import evaluate_config
    from trace_rl.evaluate.stage import run_evaluate
    from trace_rl.synthesize.command import run_config

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise UserError(f"{run} is not a trace-rl run (no manifest.json): run the earlier stages first")
    cfg = run_config(run_dir, config)
    from trace_rl.config import executor_with

    cfg.executor = executor_with(cfg.executor, executor, ray_address)
    overrides: dict[str, Any] = {
        "split": split, "trials": trials, "policy": model, "user": user_model, "task_limit": task_limit,
        "concurrency": concurrency, "seed": seed, "budget": budget, "gepa.budget": gepa_budget,
        "gepa.reflection_model": reflection_model, "single_best.select": select,
        "arms": [a.strip() for a in arms.split(",") if a.strip()] if arms else None,
    }  # fmt: skip
    if no_train:
        overrides["train_baselines"] = False
    if no_curve:
        overrides["curve.enabled"] = False
    ecfg = evaluate_config(cfg, overrides)
    command = "trace-rl evaluate " + " ".join(sys.argv[2:])
    try:
        comparison = run_evaluate(run_dir, cfg, ecfg, command=command, echo=typer.echo)
    except KeyboardInterrupt:
        typer.echo("interrupted; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    from trace_rl.evaluate.compare import markdown_table

    skipped = comparison.details.get("skipped") or {}
    typer.echo(markdown_table(comparison.arms, comparison.k_max, skipped))
    counts = {a.name: a.details.get("episodes", {}) for a in comparison.arms}
    incomplete = [name for name, c in counts.items() if c.get("infra") or c.get("missing")]
    typer.echo(f"comparison: {run_dir.root / 'evaluate' / 'comparison.json'}")
    if incomplete:
        typer.echo(f"incomplete arms: {', '.join(incomplete)}; rerun the same command to finish them", err=True)
        raise typer.Exit(1)


__all__ = ["evaluate_command"]
