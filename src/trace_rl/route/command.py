"""`trace-rl route --run runs/<name>`: build the router from the trained adapters and measure its accuracy on
held-out tasks of every capability environment (registered by cli.py).

    trace-rl route --run runs/demo                         # router.json + accuracy.json (confusion matrix, base rate)
    trace-rl route --run runs/demo --tasks 40 --oracle-trials 2   # + potential rate, routed vs oracle pass^1

The config is `--config` when given, else the one recorded in the run's manifest; `stages.route` (`RouteConfig`) is
overridden by the flags.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trace_rl.errors import UserError
from trace_rl.route.accuracy import format_confusion
from trace_rl.artifacts.store import RunDir


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def route_command(
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
) -> None:
    """Build the label-logit router and measure its accuracy on held-out capability tasks (stage 4)."""
    from trace_rl.route.stage import route_config, run_route
    from trace_rl.synthesize.command import run_config

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise UserError(f"{run} is not a trace-rl run (no manifest.json): run the earlier stages first")
    cfg = run_config(run_dir, config)
    overrides = {"model": model, "capabilities": capability or None, "tasks_per_env": tasks, "split": split,
                 "user": user_model, "oracle_trials": oracle_trials}  # fmt: skip
    if include_system:
        overrides["prompt"] = {**((cfg.stages.get("route") or {}).get("prompt") or {}), "include_system": True}
    rcfg = route_config(cfg, overrides)
    result = run_route(run_dir, cfg, rcfg, command="trace-rl route " + " ".join(sys.argv[2:]), echo=typer.echo)
    acc = result.accuracy
    interval = f" [{_pct(acc.low)}, {_pct(acc.high)}]" if acc.low is not None else ""
    typer.echo(format_confusion(result))
    typer.echo(
        f"routing accuracy {_pct(acc.value)}{interval} on {result.n_tasks} held-out tasks · "
        f"base label won {_pct(result.base_rate)}"
    )
    if result.routed_pass1 is not None and result.oracle_pass1 is not None:
        typer.echo(
            f"potential rate {_pct(result.potential_rate)} · pass^1 routed {_pct(result.routed_pass1.value)} "
            f"vs oracle {_pct(result.oracle_pass1.value)}"
        )
    for name, reason in (result.details.get("skipped") or {}).items():
        typer.echo(f"skipped {name}: {reason}", err=True)
    typer.echo(f"accuracy: {run_dir.root / 'route' / 'accuracy.json'}")


__all__ = ["route_command"]
