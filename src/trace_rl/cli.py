"""The `trace-rl` command: one sub-command per stage. Thin: parse, load config, call the stage.

User errors (bad config, unknown model, environment, split or stage) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trace_rl.config import EnvConfig, TraceConfig, load_config
from trace_rl.errors import UserError

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
ExecutorOpt = Annotated[
    str | None, typer.Option("--executor", help="local | ray: where episodes and trainings run (config: executor).")
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="Ray cluster: auto or ray://host:10001 (default: start a local one)."),
]


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


def _command_line(name: str, params: dict[str, Any]) -> str:
    """The command as it could be retyped, for the run manifest."""
    import shlex

    words = ["trace-rl", name]
    for key, value in params.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False or value == [] or value == ():
            continue
        if value is True:
            words.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                words += [flag, str(item)]
        else:
            words += [flag, str(value)]
    return shlex.join(words)


def _run_dir(run: Path | None, cfg: TraceConfig) -> Any:
    from trace_rl.artifacts.store import RunDir

    return RunDir(run if run is not None else cfg.run.runs_dir / cfg.run.name)


@app.command()
def rollout(
    ctx: typer.Context,
    env: Annotated[
        str | None, typer.Option("--env", help="tau2:retail | tau2:airline | tau2:mock | library | ...")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="Task split (default train).")] = None,
    trials: Annotated[
        int | None, typer.Option("--trials", "-k", help="Trials per task (pass^k needs k ≤ trials).")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Policy: a config model name, scripted, tiny, smollm2-135m, local:<path>, openai:<model>@<base_url> "
            "(or openai:<model> with OPENAI_BASE_URL), or a model YAML file (a `models` entry).",
        ),
    ] = None,
    adapter: Annotated[
        str | None, typer.Option("--adapter", help="LoRA adapter name (vLLM: the request's model).")
    ] = None,
    user_model: Annotated[
        str | None, typer.Option("--user-model", help="LLM user simulator model (default: the domain's scripted user).")
    ] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Model grading NL assertions.")] = None,
    run: RunOpt = None,
    config: ConfigOpt = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-j", help="Episodes in flight.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Base seed; trial seeds derive from it.")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="Only this task id (repeatable).")] = None,
    task_limit: Annotated[int | None, typer.Option("--task-limit", help="Only the first N tasks.")] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", help="Policy sampling temperature.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Policy max tokens per turn.")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Orchestrator steps per episode.")] = None,
    data_dir: DataDirOpt = None,
    task_set: TaskSetOpt = None,
    progress: Annotated[str, typer.Option("--progress", help="auto | rich | plain | none")] = "auto",
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run every task of a split K times; resumable (rerun the same command to finish and retry infra failures)."""
    from trace_rl.rollout.command import add_model_spec
    from trace_rl.rollout.command import rollout as run_rollout

    if progress not in ("auto", "rich", "plain", "none"):
        raise UserError(f"--progress: '{progress}' is not one of auto, rich, plain, none")
    cfg = _config(
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
    run_dir = _run_dir(run, cfg)
    try:
        result = run_rollout(cfg, run_dir, command=_command_line("rollout", ctx.params), progress=progress)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        typer.echo("interrupted; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    rate = f"{result.successes / result.scored:.1%}" if result.scored else "-"
    typer.echo(
        f"rollout {result.label}: {result.ran} episodes run, {result.resumed} already done, "
        f"{result.planned} planned · success {rate} ({result.successes}/{result.scored} scored this run) · "
        f"infra failures {result.infra} · {result.elapsed_s:.1f} s"
    )
    typer.echo(f"trajectories: {run_dir.root / 'rollout' / 'trajectories.jsonl'}")
    if not result.complete:
        left = result.infra + result.not_started
        why = f" ({result.stopped})" if result.stopped else ""
        typer.echo(f"incomplete: {left} episode(s) left{why}; rerun the same command to retry them", err=True)
        raise typer.Exit(1)
    typer.echo(f"next: trace-rl report --run {run_dir.root}")


@app.command()
def report(
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo.")],
    k: Annotated[int | None, typer.Option("--k", help="Largest k for pass^k (default: the planned trials).")] = None,
    samples: Annotated[int, typer.Option("--samples", help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap RNG seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
    html: Annotated[
        bool, typer.Option("--html/--no-html", help="Also write runs/<name>/report.html (not with --json).")
    ] = True,
) -> None:
    """Print the run's tables (pass^k with 95% CIs, terminations, tokens, infra failures; selected capabilities)
    and write the self-contained report.html."""
    from trace_rl.artifacts.store import RunDir

    run_dir = RunDir(run)
    run_dir.manifest()  # a one-line error when this is not a run
    if (run_dir.root / "rollout" / "trajectories.jsonl").exists():
        from trace_rl.report.rollout_tables import report as show_report

        show_report(run_dir, k_max=k, samples=samples, seed=seed, as_json=as_json)
    capabilities = run_dir.root / "diagnose" / "capabilities.json"
    if capabilities.exists() and not as_json:
        from rich.console import Console

        from trace_rl.report.capabilities import render
        from trace_rl.diagnose.stage import read_capabilities

        render(read_capabilities(run_dir), Console())
    if html and not as_json:  # --json prints only the numbers, for machines
        from trace_rl.report.html import write_html_report

        typer.echo(f"report: {write_html_report(run_dir)}")


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
    file: Annotated[
        str, typer.Option("--file", help="Trajectory store inside the run.")
    ] = "rollout/trajectories.jsonl",
) -> None:
    """Show trajectories readably: messages, tool calls and results, reward breakdown; filter failures."""
    from trace_rl.report.view import ViewFilter
    from trace_rl.report.view import view as show
    from trace_rl.artifacts.store import RunDir

    flt = ViewFilter(failed=failed, infra=infra, task=task, trial=trial, id=id, env=env, split=split)
    if show(RunDir(run), flt, show_all=show_all, limit=limit or None, full=full, relpath=file) == 0:
        raise typer.Exit(1)


StageOpt = Annotated[
    list[str] | None, typer.Option("--stage", help="Run only these stages (repeatable); default: all, in order.")
]


def _run_config(
    config: Path, stage: list[str] | None, executor: str | None = None, ray_address: str | None = None
) -> None:
    from trace_rl.pipeline import headline, run_pipeline

    run_dir = run_pipeline(config, invoke=main, only=stage, echo=typer.echo, executor=executor, ray_address=ray_address)
    report = run_dir.root / "report.html"
    if report.exists():
        typer.echo(f"report: {report.resolve()}")
    for line in headline(run_dir):
        typer.echo(line)


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML config: run, models, env, rollout, stages.*")],
    stage: StageOpt = None,
    executor: ExecutorOpt = None,
    ray_address: RayAddressOpt = None,
) -> None:
    """Run every stage in order from one YAML config, resuming what is done."""
    _run_config(config, stage, executor, ray_address)


@app.command()
def demo(
    config: Annotated[Path, typer.Option("--config", "-c", help="Demo config.")] = Path("configs/demo.yaml"),
    stage: StageOpt = None,
) -> None:
    """The whole loop on the embedded default (library domain, SmolLM2-135M, CPU): `run --config configs/demo.yaml`."""
    if not config.exists():
        raise UserError(f"demo config not found: {config} (run from the repository root or pass --config)")
    _run_config(config, stage)


def _register_stage_commands() -> None:
    """Stage commands live beside their stage; registering them here keeps this module thin."""
    from trace_rl.diagnose.command import diagnose_command
    from trace_rl.evaluate.command import evaluate_command
    from trace_rl.route.command import route_command
    from trace_rl.serve.command import serve_command
    from trace_rl.synthesize.command import synthesize_command
    from trace_rl.train.command import train_command

    app.command("diagnose")(diagnose_command)
    app.command("synthesize")(synthesize_command)
    app.command("train")(train_command)
    app.command("route")(route_command)
    app.command("evaluate")(evaluate_command)
    app.command("serve")(serve_command)


_register_stage_commands()


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors for user mistakes, exit codes 0 / 1 (failed check) / 2 (bad input)."""
    try:
        code = app(args=argv, prog_name="trace-rl", standalone_mode=False)
        if isinstance(code, int):  # click returns a command's typer.Exit code instead of raising it
            return code
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
