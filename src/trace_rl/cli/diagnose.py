"""`trace-rl diagnose`: the typer command (registered by cli/app.py). It maps its flags onto the `diagnose` section of
`--config` (else of the config recorded in the run's manifest) and calls the diagnose stage (`diagnose/stage.py`);
`--show-prompts` writes the prompts an LLM analyst would send instead (`diagnose/preview.py`), calling no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.layout import ROLLOUT_TRAJECTORIES
from trace_rl.artifacts.store import RunDir
from trace_rl.config import TraceConfig
from trace_rl.report.capabilities import render
from trace_rl.stage import StageContext, command_line, load_run_config, run_stage


def diagnose_command(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", help=f"Run directory holding {ROLLOUT_TRAJECTORIES}.")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config (sections diagnose, models).")
    ] = None,
    analyst: Annotated[
        str | None,
        typer.Option(
            "--analyst",
            help="'structural' (default, no LLM), 'behavioral', 'probe' (samples the agent at each decision point) "
            "or a model name / spec.",
        ),
    ] = None,
    probe_model: Annotated[
        str | None, typer.Option("--probe-model", help="The agent the probe samples (default: the rollout's policy).")
    ] = None,
    probe_samples: Annotated[
        int | None, typer.Option("--probe-samples", help="Probe moves per decision point and task (default 4).")
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
        bool, typer.Option("--allow-test-split", help="Permit test splits (leaks test tasks into training).")
    ] = False,
    max_candidates: Annotated[
        int | None, typer.Option("--max-candidates", help="Capabilities discovered at most.")
    ] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Trajectories per labeling call.")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="Labeling runs in flight.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Shuffling / sampling seed.")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Redo discovery and every labeling run.")] = False,
    context_tokens: Annotated[
        int | None, typer.Option("--context-tokens", help="The analyst's context length (default: the model's).")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Analyst reply budget per call.")] = None,
    show_prompts: Annotated[
        bool,
        typer.Option(
            "--show-prompts",
            help="Write the prompts an LLM analyst would send to <run>/diagnose/prompts/ and stop (no model call).",
        ),
    ] = False,
) -> None:
    """Find the capabilities the agent lacks (stage 1 of TRACE): writes diagnose/capabilities.json."""
    from trace_rl.diagnose.stage import DiagnoseStage

    run_dir = RunDir(run)
    run_dir.require()
    overrides = {
        "diagnose.analyst": analyst,
        "diagnose.n_runs": n_runs,
        "diagnose.k": k,
        "diagnose.rho": rho,
        "diagnose.delta": delta,
        "diagnose.splits": split or None,
        "diagnose.allow_test_split": allow_test_split or None,
        "diagnose.max_candidates": max_candidates,
        "diagnose.batch_size": batch_size,
        "diagnose.concurrency": concurrency,
        "diagnose.seed": seed,
        "diagnose.context_tokens": context_tokens,
        "diagnose.max_tokens": max_tokens,
        "diagnose.probe.policy": probe_model,
        "diagnose.probe.samples": probe_samples,
    }
    cfg = load_run_config(run_dir, config, overrides)
    if show_prompts:
        _show_prompts(run_dir, cfg)
        return
    result = run_stage(
        DiagnoseStage(fresh=fresh), StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo)
    )
    render(result.file)


def _show_prompts(run_dir: RunDir, cfg: TraceConfig) -> None:
    """Build the analyst's client (for its tokenizer and context), write the prompts, never call the model."""
    from trace_rl.diagnose.preview import preview
    from trace_rl.models.registry import build_client
    from trace_rl.models.specs import model_from_spec

    section = cfg.diagnose
    client = None
    if section.needs_analyst_model:
        name, model_cfg = model_from_spec(section.analyst, cfg)
        client = build_client(model_cfg, name=name)
    result = preview(run_dir, section, client)  # type: ignore[arg-type]  # None only with a no-LLM analyzer, which preview refuses
    for line in result.lines:
        typer.echo(line)


__all__ = ["diagnose_command"]
