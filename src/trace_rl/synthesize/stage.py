"""`run_synthesize(run, cfg, clients)`: stage 2 of TRACE, one calibrated environment per selected capability.

Each selected capability (or each in `only`) gets `envs/<capability>/` inside the run directory, built by `build.py`
(evidence, a generator, validation, the leak check, calibration, a final status). A folder with a status.json is final
and skipped, so the stage resumes where it stopped; a folder without one (an interrupted attempt) is built again from
scratch. `synthesize/summary.json` is the run report and `synthesize/capabilities.json` the capabilities with their
new status (synthesized | needs_attention).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from trace_rl.artifacts.capabilities import read_capabilities
from trace_rl.artifacts.environments import EnvStatus, read_env_spec, read_env_status
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.config import EnvConfig, TraceConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient
from trace_rl.models.registry import build_clients
from trace_rl.stage import StageContext
from trace_rl.synthesize.build import Context, synthesize_one
from trace_rl.tracking import TrackingSettings, check_available, tracking
from trace_rl.types import Capability

STAGE = "synthesize"


def target_config(run: RunDir, cfg: TraceConfig | None) -> EnvConfig:
    """The run's target environment: the manifest's `env` (what the rollouts used), else the config's."""
    recorded = run.manifest().config.get("env") if run.exists() else None
    if recorded:
        return EnvConfig.model_validate(recorded)
    if cfg is not None:
        return cfg.env
    raise UserError(f"{run.root}: the manifest records no target environment (config.env)")


def run_synthesize(
    run: RunDir,
    cfg: TraceConfig | None,
    clients: dict[str, ModelClient],
    *,
    syn: SynthesizeConfig | None = None,
    only: list[str] | None = None,
    echo: Callable[[str], None] = lambda _: None,
    command: str | None = None,
) -> dict[str, Any]:
    """Synthesize every selected capability's environment (or those in `only`); returns the run report. `command`
    (the command line that ran it) is recorded in the manifest. Runs its own event loop; from async code, await
    `arun_synthesize` instead."""
    return asyncio.run(arun_synthesize(run, cfg, clients, syn=syn, only=only, echo=echo, command=command))


async def arun_synthesize(
    run: RunDir,
    cfg: TraceConfig | None,
    clients: dict[str, ModelClient],
    *,
    syn: SynthesizeConfig | None = None,
    only: list[str] | None = None,
    echo: Callable[[str], None] = lambda _: None,
    command: str | None = None,
) -> dict[str, Any]:
    """`run_synthesize` on the caller's event loop."""
    from trace_rl.envs.registry import load_domain

    syn = syn or (cfg.synthesize if cfg is not None else SynthesizeConfig())
    selected = read_capabilities(run).selected
    if only:
        unknown = sorted(set(only) - {c.name for c in selected})
        if unknown:
            raise UserError(
                f"not a selected capability: {', '.join(unknown)} (selected: "
                f"{', '.join(c.name for c in selected) or 'none'})"
            )
        selected = [c for c in selected if c.name in only]
    target_cfg = target_config(run, cfg)
    target = load_domain(target_cfg.name, target_cfg)
    if syn.calibrate and syn.policy not in clients:
        raise UserError(f"calibration needs the policy model '{syn.policy}' (or set synthesize.calibrate: false)")
    settings = TrackingSettings.from_run(cfg.run, run.root, run_name=STAGE) if cfg is not None else None
    if settings is not None and settings.enabled:
        check_available(settings.report_to)  # before any work
    if command is not None:
        run.ensure(command=command)
    with run.stage(STAGE, config=syn.model_dump(mode="json"), command=command) as record, tracking(settings) as tracker:
        ctx = Context(run, syn, target_cfg, target, clients)
        ctx.tracker = tracker
        report = await _synthesize_all(ctx, selected, echo)
        record.summary = {
            name: {k: v for k, v in r.items() if k in ("status", "generator", "attempts")}
            for name, r in report["capabilities"].items()
        }
    return report


async def _synthesize_all(ctx: Context, selected: list[Capability], echo: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"target": ctx.target_cfg.name, "capabilities": {}, "created_at": time.time()}
    for cap in selected:
        folder = ctx.run.env(cap.name).folder
        status = read_env_status(EnvLayout(folder))
        if status is not None:
            echo(f"{cap.name}: {status.status} (already synthesized, skipped)")
            out["capabilities"][cap.name] = _summary(folder, status, skipped=True)
            continue
        if folder.exists():
            shutil.rmtree(folder)  # an interrupted attempt: start this capability again
        folder.mkdir(parents=True)
        status = await synthesize_one(ctx, cap, folder, echo)
        echo(f"{cap.name}: {status.status}{(' - ' + status.reason) if status.reason else ''}")
        out["capabilities"][cap.name] = _summary(folder, status, skipped=False)
    atomic_write_json(ctx.run.synthesize_summary, out)
    statuses = {"ready": "synthesized", "needs_attention": "needs_attention"}
    caps = [
        c.model_copy(update={"status": statuses[out["capabilities"][c.name]["status"]]}).model_dump(mode="json")
        for c in selected
        if c.name in out["capabilities"]
    ]
    atomic_write_json(ctx.run.synthesized_capabilities, {"capabilities": caps})
    return out


def _summary(folder: Path, status: EnvStatus, *, skipped: bool) -> dict[str, Any]:
    env = EnvLayout(folder)
    spec = read_env_spec(env) if env.spec.exists() else None
    return {
        "status": status.status,
        "reason": status.reason,
        "attempts": status.attempts,
        "generator": spec.generator.kind if spec else None,
        "difficulty": spec.generator.difficulty if spec else None,
        "figures": status.figures,
        "folder": str(folder),
        "skipped": skipped,
    }


@dataclass(frozen=True)
class SynthesizeStage:
    """The synthesize stage over the run's selected capabilities (or only those in `only`)."""

    only: tuple[str, ...] = ()
    name: ClassVar[str] = STAGE

    def section(self, config: TraceConfig) -> SynthesizeConfig:
        return config.synthesize

    def run(self, ctx: StageContext, section: SynthesizeConfig) -> dict[str, Any]:
        cfg, run = ctx.config, ctx.run
        run.require("run rollout and diagnose first")
        if section.generator == "llm" and (not section.author or section.author not in cfg.models):
            raise UserError(f"--generator llm needs an author model ('{section.author}' is not in the config's models)")
        if section.calibrate and section.policy not in cfg.models:
            raise UserError(f"calibration needs the policy model '{section.policy}': pass --policy or --no-calibrate")
        names = [section.policy] if section.calibrate else []
        if section.generator != "target" and section.author:
            names.append(section.author)
        clients = build_clients(cfg, [n for n in names if n in cfg.models])
        try:
            only = list(self.only) or None
            report = run_synthesize(run, cfg, clients, syn=section, only=only, echo=ctx.echo, command=ctx.command)
        finally:
            asyncio.run(clients.aclose())
        ready = sum(r["status"] == "ready" for r in report["capabilities"].values())
        ctx.echo(f"synthesize: {ready}/{len(report['capabilities'])} environments ready ({run.envs_dir})")
        return report


SYNTHESIZE = SynthesizeStage()


__all__ = ["STAGE", "SYNTHESIZE", "SynthesizeStage", "arun_synthesize", "run_synthesize", "target_config"]
