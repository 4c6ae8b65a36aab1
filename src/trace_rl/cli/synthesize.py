"""`trace-rl synthesize --run runs/<name> [--capability NAME]`: the typer command (registered by cli/app.py).

It maps its flags onto the `synthesize` section of `--config` (else of the config recorded in the run's manifest) and
calls the synthesize stage (`synthesize/stage.py`). Model flags take a config model name or a model spec (`scripted`,
`tiny`, `smollm2-135m`, `local:<path>`, `openai:<model>[@<url>]`) or a model YAML file (`models/specs.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trace_rl.artifacts.store import RunDir
from trace_rl.models.specs import add_model_spec
from trace_rl.stage import StageContext, command_line, load_run_config, run_stage


def synthesize_command(
    ctx: typer.Context,
    run: Annotated[Path, typer.Option("--run", help="Run directory, e.g. runs/demo (after diagnose).")],
    capability: Annotated[
        list[str] | None, typer.Option("--capability", help="Only this capability (repeatable).")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config (default: the run's).")] = None,
    generator: Annotated[str | None, typer.Option("--generator", help="target | llm | auto.")] = None,
    policy: Annotated[str | None, typer.Option("--policy", help="Base policy model for calibration.")] = None,
    author: Annotated[str | None, typer.Option("--author", help="Author model for generated environments.")] = None,
    groups: Annotated[int | None, typer.Option("--groups", help="Calibration seeds G.")] = None,
    samples: Annotated[int | None, typer.Option("--samples", help="Calibration samples per seed K.")] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts", help="Calibration attempts.")] = None,
    no_calibrate: Annotated[bool, typer.Option("--no-calibrate", help="Validate only; mark ready.")] = False,
) -> None:
    """Build one training environment per selected capability (stage 2): envs/<capability>/ in the run."""
    from trace_rl.synthesize.stage import SynthesizeStage

    run_dir = RunDir(run)
    run_dir.require("run rollout and diagnose first")
    overrides = {
        "synthesize.generator": generator,
        "synthesize.groups": groups,
        "synthesize.samples": samples,
        "synthesize.max_attempts": max_attempts,
        "synthesize.calibrate": False if no_calibrate else None,
    }
    cfg = load_run_config(run_dir, config, overrides)
    if policy is not None:
        cfg.synthesize.policy = add_model_spec(cfg, policy)
    if author is not None:
        cfg.synthesize.author = add_model_spec(cfg, author)
    stage = SynthesizeStage(only=tuple(capability or ()))
    run_stage(stage, StageContext(cfg, run_dir, command=command_line(ctx), echo=typer.echo))


__all__ = ["synthesize_command"]
