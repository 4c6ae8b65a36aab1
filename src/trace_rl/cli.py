"""The `trace-rl` command: one sub-command per stage. Thin: parse, load config, call the stage.

User errors (bad config, unknown model, environment, split or stage) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trace_rl.config import EnvConfig, TraceConfig, load_config
from trace_rl.errors import NotImplementedStage, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="TRACE: rollout → diagnose → synthesize → train → route → evaluate, as reproducible commands.",
)
env_app = typer.Typer(no_args_is_help=True, help="Inspect and check environments.")
app.add_typer(env_app, name="env")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (one section per stage).")]
RunOpt = Annotated[Path | None, typer.Option("--run", help="Run directory, e.g. runs/demo.")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="τ² data directory (or TRACE_TAU2_DATA).")]
TaskSetOpt = Annotated[str | None, typer.Option("--task-set", help="τ² task file: head or v0.2.")]


def _stage(module: str, stage: str) -> Any:
    """Import `trace_rl.<module>`; a stage that has not landed yet is a one-line error."""
    try:
        return importlib.import_module(f"trace_rl.{module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"trace_rl.{module.split('.')[0]}"):
            raise NotImplementedStage(stage) from None
        raise


def _config(config: Path | None, overrides: dict[str, Any]) -> TraceConfig:
    return load_config(config, overrides)


@env_app.command("check")
def env_check(
    name: Annotated[str, typer.Argument(help="tau2:retail | tau2:airline | tau2:mock | library")],
    task_set: TaskSetOpt = None,
    data_dir: DataDirOpt = None,
    split: Annotated[list[str] | None, typer.Option("--split", help="Splits to replay (default: all).")] = None,
) -> None:
    """Replay every task's gold actions; the last line is `gold-replay: <matched>/<total> db-match`."""
    from trace_rl.envs.check import check_domain
    from trace_rl.envs.registry import load_domain

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


def _not_yet(stage: str) -> None:
    raise NotImplementedStage(stage)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def diagnose(ctx: typer.Context) -> None:
    """Find the capabilities the agent lacks (stage 1 of TRACE)."""
    _not_yet("diagnose")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def synthesize(ctx: typer.Context) -> None:
    """Build one training environment per selected capability (stage 2)."""
    _not_yet("synthesize")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(ctx: typer.Context) -> None:
    """Train one LoRA adapter per capability with multi-turn GRPO (stage 3)."""
    _not_yet("train")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def route(ctx: typer.Context) -> None:
    """Build the label-logit router and measure its accuracy (stage 4)."""
    _not_yet("route")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def evaluate(ctx: typer.Context) -> None:
    """Compare base, TRACE and the paper's baselines on held-out tasks."""
    _not_yet("evaluate")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(ctx: typer.Context) -> None:
    """OpenAI-compatible endpoint that routes each conversation to its adapter."""
    _not_yet("serve")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(ctx: typer.Context) -> None:
    """Run every stage in order from one YAML config, resuming what is done."""
    _not_yet("run")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def demo(ctx: typer.Context) -> None:
    """The whole loop on the embedded default (library domain, SmolLM2-135M, CPU)."""
    _not_yet("demo")


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors for user mistakes, exit codes 0 / 1 (failed check) / 2 (bad input)."""
    try:
        app(args=argv, prog_name="trace-rl", standalone_mode=False)
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            return 0
        if hasattr(exc, "format_message"):  # click usage errors: unknown command, bad option
            typer.echo(f"error: {exc.format_message()}", err=True)  # type: ignore[attr-defined]
            return int(getattr(exc, "exit_code", 2))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
