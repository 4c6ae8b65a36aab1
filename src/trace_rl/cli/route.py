"""`trace-rl route --run runs/<name>`: build the router from the trained adapters and measure its accuracy on
held-out tasks of every capability environment (registered by cli/app.py).

    trace-rl route --run runs/demo                         # router.json + accuracy.json (confusion matrix, base rate)
    trace-rl route --run runs/demo --tasks 40 --oracle-trials 2   # + potential rate, routed vs oracle pass^1
    trace-rl route --run runs/demo --calibration fitted           # label offsets fitted on train-side openings

The command maps its flags onto the `route` section (`RouteConfig`) of `--config`, else of the config recorded in the
run's manifest, and calls the route stage (`route/stage.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.store import RunDir
from trace_rl.stage import StageContext, command_line, load_run_config, run_stage


def route_command(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo (after train).")],
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (default: the run's).")] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Classifier = the frozen base model (config name or spec).")
    ] = None,
    capability: Annotated[
        list[str] | None, typer.Option("--capability", help="Route among these adapters only (repeatable).")
    ] = None,
    tasks: Annotated[int | None, typer.Option("--tasks", help="Held-out tasks per capability environment.")] = None,
    split: Annotated[str | None, typer.Option("--split", help="Held-out split of the capability envs.")] = None,
    user_model: Annotated[
        str | None, typer.Option("--user-model", help="User simulator for the first message (default: scripted).")
    ] = None,
    oracle_trials: Annotated[
        int | None, typer.Option("--oracle-trials", help="Run every option on every task K times (oracle figures).")
    ] = None,
    include_system: Annotated[
        bool, typer.Option("--include-system", help="Show the agent's system prompt excerpt to the classifier.")
    ] = False,
    calibration: Annotated[
        str | None,
        typer.Option("--calibration", help="Label offsets: none, content_free or fitted (routing/bias.py)."),
    ] = None,
) -> None:
    """Build the label-logit router and measure its accuracy on held-out capability tasks (stage 4)."""
    from trace_rl.route.stage import ROUTE

    run_dir = RunDir(run)
    run_dir.require("run the earlier stages first")
    overrides = {
        "route.model": model,
        "route.capabilities": capability or None,
        "route.tasks_per_env": tasks,
        "route.split": split,
        "route.user": user_model,
        "route.oracle_trials": oracle_trials,
        "route.prompt.include_system": include_system or None,
        "route.calibration": calibration,
    }
    cfg = load_run_config(run_dir, config, overrides)
    run_stage(ROUTE, StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo))


__all__ = ["route_command"]
