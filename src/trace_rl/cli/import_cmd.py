"""`trace-rl import`: an agent log written elsewhere (τ² results.json, τ-bench v1 trajectories, JSONL of OpenAI
messages) becomes a run directory that `diagnose`, `view` and `report` read (rollout/imported.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.store import RunDir
from trace_rl.stage import command_line


def import_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="The log file (.json, .jsonl; .gz read transparently).")],
    run: Annotated[Path, typer.Option("--run", help="New run directory to create, e.g. runs/grok-airline.")],
    fmt: Annotated[str, typer.Option("--format", help="auto | tau2 | taubench | jsonl.")] = "auto",
    env: Annotated[str | None, typer.Option("--env", help="Environment (default: named by the file).")] = None,
    task_set: Annotated[
        str | None, typer.Option("--task-set", help="τ² task set the run was scored on (default: the matching one).")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="τ² data directory.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Agent model name (default: the file's).")] = None,
    user_model: Annotated[str | None, typer.Option("--user-model", help="User-simulator model name.")] = None,
    allow_task_mismatch: Annotated[
        bool,
        typer.Option("--allow-task-mismatch", help="Import although the file's tasks differ from the environment's."),
    ] = False,
) -> None:
    """Import an agent log as a run (split `imported`), then `trace-rl diagnose --run <dir>`."""
    from trace_rl.rollout.imported import import_log

    result = import_log(
        file,
        RunDir(run),
        fmt=fmt,
        env=env,
        task_set=task_set,
        data_dir=data_dir,
        model=model,
        user_model=user_model,
        allow_mismatch=allow_task_mismatch,
        command=command_line(ctx),
    )
    for warning in result.warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(result.line)
    typer.echo(f"next: trace-rl diagnose --run {run}")


__all__ = ["import_command"]
