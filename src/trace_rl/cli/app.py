"""The `trace-rl` command: one sub-command per stage, `run` for all of them, and the inspection commands.

Thin: each stage command lives in its own module here (`trace_rl/cli/<stage>.py`), maps its flags onto the stage's
config section and calls the stage object; `run` hands the config to the pipeline (pipeline.py), which calls the same
objects. User errors (bad config, unknown model, environment, split or stage) print one line and exit 2, never a
traceback; a stage that left work to retry exits 1, an interrupted one 130.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.layout import REPORT_FILE, ROLLOUT_TRAJECTORIES
from trace_rl.artifacts.store import RunDir
from trace_rl.cli.export_cmd import export_app
from trace_rl.cli.runner import run_app
from trace_rl.config import EnvConfig, TraceConfig
from trace_rl.config.base import MAX_TRIALS
from trace_rl.errors import UserError
from trace_rl.stage import StageContext, command_line, run_stage

MAX_SAMPLES = 100_000  # bootstrap resamples: the intervals' Monte-Carlo error is tiny long before this

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="TRACE: rollout → diagnose → synthesize → train → route → evaluate, as reproducible commands.",
)
env_app = typer.Typer(no_args_is_help=True, help="Inspect and check environments.")
app.add_typer(env_app, name="env")
app.add_typer(export_app, name="export")

ExecutorOpt = Annotated[
    str | None, typer.Option("--executor", help="local | ray: where episodes and trainings run (config: executor).")
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="Ray cluster: auto or ray://host:10001 (default: start a local one)."),
]
StageOpt = Annotated[
    list[str] | None, typer.Option("--stage", help="Run only these stages (repeatable); default: all, in order.")
]


@env_app.command("check")
def env_check(
    name: Annotated[str, typer.Argument(help="tau2:retail | tau2:airline | tau2:mock | library")],
    task_set: Annotated[str | None, typer.Option("--task-set", help="τ² task file: head or v0.2.")] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="τ² data directory (or TRACE_TAU2_DATA).")] = None,
    split: Annotated[list[str] | None, typer.Option("--split", help="Splits to replay (default: all).")] = None,
) -> None:
    """Replay every task's gold actions; the last line is `gold-replay: <matched>/<total> db-match`."""
    from trace_rl.envs.check import check_domain
    from trace_rl.envs.registry import load_domain

    if task_set and name == "toolsandbox":  # ToolSandbox's task sets are part of its name: toolsandbox:<set>
        name, task_set = f"toolsandbox:{task_set}", None
    cfg = EnvConfig(name=name, data_dir=data_dir, **({"task_set": task_set} if task_set else {}))
    domain = load_domain(name, cfg)
    splits = split or domain.splits()
    result = check_domain(domain, splits)
    for task_id in result.mismatched:
        typer.echo(f"mismatch: {task_id}")
    typer.echo(f"gold actions with tool errors: {len(result.gold_errors)} tasks")
    typer.echo(result.line)
    if result.matched != result.total:
        raise typer.Exit(1)


def _register_stage_commands() -> None:
    """Stage commands live in their own modules (`cli/<stage>.py`); registering them here keeps this module thin."""
    from trace_rl.cli.diagnose import diagnose_command
    from trace_rl.cli.evaluate import evaluate_command
    from trace_rl.cli.import_cmd import import_command
    from trace_rl.cli.rollout import rollout_command
    from trace_rl.cli.route import route_command
    from trace_rl.cli.serve import serve_command
    from trace_rl.cli.synthesize import synthesize_command
    from trace_rl.cli.train import train_command

    app.command("rollout")(rollout_command)
    app.command("import")(import_command)
    app.command("diagnose")(diagnose_command)
    app.command("synthesize")(synthesize_command)
    app.command("train")(train_command)
    app.command("route")(route_command)
    app.command("evaluate")(evaluate_command)
    app.command("serve")(serve_command)


_register_stage_commands()


@app.command()
def report(
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    k: Annotated[int | None, typer.Option("--k", help="Largest k for pass^k (default: the planned trials).")] = None,
    samples: Annotated[int, typer.Option("--samples", help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap RNG seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
    html: Annotated[
        bool, typer.Option("--html/--no-html", help=f"Also write runs/<name>/{REPORT_FILE} (not with --json).")
    ] = True,
) -> None:
    """Print the run's tables (pass^k with 95% CIs, terminations, tokens, infra failures; selected capabilities)
    and write the self-contained report.html."""
    from trace_rl.report.stage import ReportStage

    if k is not None and not 1 <= k <= MAX_TRIALS:
        raise UserError(f"--k: {k} is not a pass^k to compute (1 ≤ k ≤ {MAX_TRIALS})")
    if not 1 <= samples <= MAX_SAMPLES:
        raise UserError(f"--samples: {samples} bootstrap resamples (need 1 to {MAX_SAMPLES})")
    stage = ReportStage(k=k, samples=samples, seed=seed, as_json=as_json, html=html)
    run_stage(stage, StageContext(TraceConfig(), RunDir(run), echo=typer.echo))


@app.command()
def view(
    run: Annotated[Path, typer.Argument(help="Run directory, e.g. runs/demo.")],
    failed: Annotated[bool, typer.Option("--failed", help="Only scored episodes that failed.")] = False,
    infra: Annotated[bool, typer.Option("--infra", help="Only infrastructure failures.")] = False,
    task: Annotated[str | None, typer.Option("--task", help="Only this task id.")] = None,
    trial: Annotated[int | None, typer.Option("--trial", help="Only this trial.")] = None,
    id: Annotated[str | None, typer.Option("--id", help="One trajectory id (<env>/<split>/<task>/<trial>).")] = None,
    env: Annotated[str | None, typer.Option("--env", help="Only this environment.")] = None,
    split: Annotated[str | None, typer.Option("--split", help="Only this split.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Show every match in full, not a list.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many matches (0 = no limit).")] = 50,
    full: Annotated[bool, typer.Option("--full", help="Do not shorten long messages.")] = False,
    file: Annotated[str, typer.Option("--file", help="Trajectory store inside the run.")] = ROLLOUT_TRAJECTORIES,
) -> None:
    """Show trajectories readably: messages, tool calls and results, reward breakdown; filter failures."""
    from trace_rl.report.view import ViewFilter
    from trace_rl.report.view import view as show

    if limit < 0:
        raise UserError(f"--limit: {limit} (0 = no limit, else at most this many matches)")
    store = (run / file).resolve()
    if not store.is_relative_to(run.resolve()):
        raise UserError(f"--file: {file} is outside the run directory {run}")

    flt = ViewFilter(failed=failed, infra=infra, task=task, trial=trial, id=id, env=env, split=split)
    if show(RunDir(run), flt, show_all=show_all, limit=limit or None, full=full, relpath=file) == 0:
        raise typer.Exit(1)


def _run_config(
    command: str, config: Path, stage: list[str] | None, executor: str | None = None, ray_address: str | None = None
) -> None:
    from trace_rl.pipeline import headline, run_pipeline

    run_dir = run_pipeline(
        config, command=command, only=stage, echo=typer.echo, executor=executor, ray_address=ray_address
    )
    if run_dir.report.exists():
        typer.echo(f"report: {run_dir.report.resolve()}")
    for line in headline(run_dir):
        typer.echo(line)


@app.command()
def run(
    ctx: typer.Context,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML config: run, models, env, executor, one section per stage.")
    ],
    stage: StageOpt = None,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run every stage in order from one YAML config, resuming what is done."""
    _run_config(command_line(ctx), config, stage, executor, ray_address)


@app.command()
def demo(
    ctx: typer.Context,
    config: Annotated[Path, typer.Option("--config", "-c", help="Demo config.")] = Path("configs/demo.yaml"),
    stage: StageOpt = None,
) -> None:
    """The whole loop on the embedded default (library domain, SmolLM2-135M, CPU): `run --config configs/demo.yaml`."""
    if not config.exists():
        raise UserError(f"demo config not found: {config} (run from the repository root or pass --config)")
    _run_config(command_line(ctx), config, stage)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `trace-rl` (exit codes: `cli/runner.py`)."""
    return run_app(app, argv, "trace-rl")


if __name__ == "__main__":
    sys.exit(main())
