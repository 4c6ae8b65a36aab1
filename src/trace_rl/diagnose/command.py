"""`trace-rl diagnose`: the typer command function (registered by cli.py).

Settings come from `stages.diagnose` of `--config` (else of the config recorded in the run's manifest), then flags.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from trace_rl.config import TraceConfig, load_config, model_from_spec
from trace_rl.config.diagnose import DiagnoseConfig, diagnose_config
from trace_rl.diagnose.stage import DiagnoseResult, diagnose_async
from trace_rl.errors import UserError
from trace_rl.artifacts.store import RunDir


def _trace_config(config: Path | None, run: RunDir) -> TraceConfig:
    if config is not None:
        return load_config(config)
    try:  # the config the run was created with, when it is a whole TraceConfig
        return TraceConfig.model_validate(run.manifest().config)
    except Exception:
        return TraceConfig()


async def _run(run: RunDir, cfg: DiagnoseConfig, trace_cfg: TraceConfig, fresh: bool) -> DiagnoseResult:
    client = None
    if not cfg.is_structural:
        from trace_rl.models.resolve import build_client

        name, model_cfg = model_from_spec(cfg.analyst, trace_cfg)
        client = build_client(model_cfg, name=name)
    try:
        return await diagnose_async(run, cfg, client, fresh=fresh)
    finally:
        if client is not None:
            await client.aclose()


def _command_line(run: Path, config: Path | None, overrides: dict[str, Any], fresh: bool) -> str:
    parts = ["trace-rl", "diagnose", "--run", str(run)]
    if config is not None:
        parts += ["--config", str(config)]
    for key, value in overrides.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            for v in value:
                parts += [flag.removesuffix("s"), str(v)]
        else:
            parts += [flag, str(value)]
    return " ".join(parts + (["--fresh"] if fresh else []))


def diagnose_command(
    run: Annotated[Path, typer.Option("--run", help="Run directory holding rollout/trajectories.jsonl.")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config (stages.diagnose, models).")
    ] = None,
    analyst: Annotated[
        str | None, typer.Option("--analyst", help="'structural' (default, no LLM) or a model name / spec.")
    ] = None,
    n_runs: Annotated[
        int | None, typer.Option("--n-runs", help="Labeling runs N (default 10 LLM, 1 structural).")
    ] = None,
    k: Annotated[int | None, typer.Option("--k", help="Runs a capability must pass (default ceil(0.8·N)).")] = None,
    rho: Annotated[float | None, typer.Option("--rho", help="Min. coverage of failures (default 0.10).")] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="Min. gap ER− − ER+ (default 0.20).")] = None,
    split: Annotated[
        list[str] | None, typer.Option("--split", help="Split to diagnose (repeatable; default train).")
    ] = None,
    allow_test_split: Annotated[
        bool, typer.Option("--allow-test-split", help="Permit test splits (leaks test tasks; TRACE §11.1).")
    ] = False,
    max_candidates: Annotated[
        int | None, typer.Option("--max-candidates", help="Capabilities discovered at most.")
    ] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Trajectories per labeling call.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="Labeling runs in flight.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Shuffling / sampling seed.")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Redo discovery and every labeling run.")] = False,
) -> None:
    """Find the capabilities the agent lacks (stage 1 of TRACE): writes diagnose/capabilities.json."""
    from trace_rl.report.capabilities import render

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise UserError(f"{run} is not a trace-rl run (no manifest.json)")
    trace_cfg = _trace_config(config, run_dir)
    overrides: dict[str, Any] = {
        "analyst": analyst, "n_runs": n_runs, "k": k, "rho": rho, "delta": delta, "splits": split or None,
        "allow_test_split": allow_test_split or None, "max_candidates": max_candidates, "batch_size": batch_size,
        "concurrency": concurrency, "seed": seed,
    }  # fmt: skip
    cfg = diagnose_config(trace_cfg.stages.get("diagnose"), overrides)
    line = _command_line(run, config, overrides, fresh)
    run_dir.update_manifest(lambda m: m.commands.append(line))
    result = asyncio.run(_run(run_dir, cfg, trace_cfg, fresh))
    render(result.file)
    typer.echo(f"wrote {result.path} ({len(result.selected)} selected: {', '.join(result.selected) or 'none'})")


__all__ = ["diagnose_command"]
