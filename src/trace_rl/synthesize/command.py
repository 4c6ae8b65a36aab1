"""`trace-rl synthesize --run runs/<name> [--capability NAME]`: stage 2 as a command (registered by cli.py).

The config is `--config` when given, else the one recorded in the run's manifest; the `stages.synthesize` section
(`SynthesizeConfig`) is overridden by the flags. Model flags take a config model name or a model spec
(`scripted`, `tiny`, `smollm2-135m`, `local:<path>`, `openai:<model>[@<url>]`).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from trace_rl.config import TraceConfig, load_config, model_from_spec
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.artifacts.store import RunDir


def run_config(run: RunDir, config: Path | None) -> TraceConfig:
    if config is not None:
        return load_config(config)
    recorded = run.manifest().config
    try:
        return TraceConfig.model_validate(recorded)
    except ValueError:  # an older or partial record: keep what is readable
        known = {k: v for k, v in recorded.items() if k in ("env", "models", "stages")}
        return TraceConfig.model_validate(known)


def _resolve_model(cfg: TraceConfig, spec: str | None) -> str | None:
    if spec is None:
        return None
    name, model_cfg = model_from_spec(spec, cfg)
    cfg.models.setdefault(name, model_cfg)
    return name


def build_clients(cfg: TraceConfig, names: list[str]) -> dict[str, ModelClient]:
    from trace_rl.models.resolve import build_client

    return {name: build_client(cfg.model(name), name=name) for name in dict.fromkeys(names) if name in cfg.models}


def synthesize_command(
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
    from trace_rl.config.synthesize import synthesize_config
    from trace_rl.synthesize.stage import run_synthesize

    run_dir = RunDir(run)
    if not run_dir.exists():
        raise UserError(f"{run} is not a trace-rl run (no manifest.json): run rollout and diagnose first")
    cfg = run_config(run_dir, config)
    overrides: dict[str, Any] = {
        "generator": generator, "groups": groups, "samples": samples, "max_attempts": max_attempts,
        "policy": _resolve_model(cfg, policy), "author": _resolve_model(cfg, author),
    }  # fmt: skip
    if no_calibrate:
        overrides["calibrate"] = False
    syn = synthesize_config(cfg, overrides)
    names = [syn.policy] if syn.calibrate else []
    if syn.generator != "target" and syn.author:
        names.append(syn.author)
    if syn.generator == "llm" and (not syn.author or syn.author not in cfg.models):
        raise UserError(f"--generator llm needs an author model ('{syn.author}' is not in the config's models)")
    if syn.calibrate and syn.policy not in cfg.models:
        raise UserError(f"calibration needs the policy model '{syn.policy}': pass --policy or --no-calibrate")
    run_dir.ensure(command="synthesize " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "synthesize")
    clients = build_clients(cfg, names)
    try:
        report = run_synthesize(run_dir, cfg, clients, syn=syn, only=capability, echo=typer.echo)
    finally:
        for client in clients.values():
            asyncio.run(client.aclose())
    ready = sum(r["status"] == "ready" for r in report["capabilities"].values())
    typer.echo(f"synthesize: {ready}/{len(report['capabilities'])} environments ready ({run_dir.root / 'envs'})")


__all__ = ["build_clients", "run_config", "synthesize_command"]
