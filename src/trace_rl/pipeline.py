"""`trace-rl run --config <file>`: every stage in order, each resuming what is already done.

rollout (train split) → diagnose → synthesize → train → route → evaluate (held-out split) → report. The pipeline calls
the same stage objects as the stage commands (`Stage.run`, trace_rl/stage.py), with the same config and run
directory, so a stage can also be rerun alone. Before any compute it checks the config (every section, validated at
load), the environment's data, the model endpoints and the disk. The manifest records the command once
(`trace-rl run ...`), and every stage record names it.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from trace_rl.artifacts.adapters import capability_adapters
from trace_rl.artifacts.evaluation import Comparison
from trace_rl.artifacts.store import RunDir
from trace_rl.config import EXECUTOR_STAGES, TraceConfig, executor_with, load_config
from trace_rl.errors import UserError
from trace_rl.stage import Echo, Stage, StageContext, StageFailed, print_echo, run_stage
from trace_rl.training.defaults import quiet_defaults

STAGE_OBJECTS = {
    "rollout": "trace_rl.rollout.stage:ROLLOUT",
    "diagnose": "trace_rl.diagnose.stage:DIAGNOSE",
    "synthesize": "trace_rl.synthesize.stage:SYNTHESIZE",
    "train": "trace_rl.train.stage:TRAIN",
    "route": "trace_rl.route.stage:ROUTE",
    "evaluate": "trace_rl.evaluate.stage:EVALUATE",
    "report": "trace_rl.report.stage:REPORT",
}  # in pipeline order; imported when the stage runs (train and evaluate pull in torch)
STAGES = tuple(STAGE_OBJECTS)
MIN_FREE_BYTES = 2 * 1024**3  # adapters, checkpoints and a converted model


def load_stage(name: str) -> Stage[Any, Any]:
    """The stage object registered under `name`."""
    module, _, attribute = STAGE_OBJECTS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def _check_endpoint(name: str, base_url: str, timeout_s: float = 5.0) -> None:
    url = base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise UserError(f"model '{name}': endpoint {base_url} is not reachable ({type(exc).__name__})") from None


def preflight(cfg: TraceConfig, run_root: Path) -> list[str]:
    """Check everything a run needs before spending compute; returns notes, raises UserError naming what is missing.
    (The config itself, every stage section included, was validated when it was loaded.)"""
    notes: list[str] = []
    from trace_rl.envs.registry import load_domain

    domain = load_domain(cfg.env.name, cfg.env)
    if not domain.tasks(cfg.rollout.split):
        raise UserError(f"env {cfg.env.name}: split '{cfg.rollout.split}' has no tasks")
    cfg.model(cfg.rollout.policy)
    if any(cfg.executor.for_stage(s).kind == "ray" for s in EXECUTOR_STAGES):
        from trace_rl.executor.ray_executor import import_ray

        import_ray()
        notes.append(
            f"executor: ray ({cfg.executor.address or 'a local instance'}, {cfg.executor.num_workers} workers)"
        )
    for name, model in cfg.models.items():
        if model.kind == "openai":
            endpoints = model.endpoints()
            if not endpoints:
                raise UserError(f"model '{name}': no base_url (set models.{name}.base_url or OPENAI_BASE_URL)")
            for base_url in endpoints:
                _check_endpoint(name, base_url)
        elif model.kind == "local" and not Path(model.model).is_dir():
            from trace_rl.models.resolve import resolve_model_path

            if model.model == "smollm2-135m":
                from trace_rl.models.resolve import smollm2_gguf_path

                smollm2_gguf_path()  # raises a UserError when the package is missing
                notes.append(f"model '{name}': smollm2-135m (converted once into the cache)")
            else:
                resolve_model_path(model.model)
    run_root.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(run_root.parent).free
    if free < MIN_FREE_BYTES:
        raise UserError(f"disk: {free / 1024**3:.1f} GiB free under {run_root.parent}, need at least 2 GiB")
    return notes


@contextlib.contextmanager
def shared_cluster(cfg: TraceConfig, stages: list[str]) -> Iterator[None]:
    """One local Ray instance for the whole pipeline when a stage runs on Ray without an address (each stage would
    otherwise start and stop its own); the stages find it initialised and use it."""
    wanted = [s for s in stages if s in EXECUTOR_STAGES and cfg.executor.for_stage(s).kind == "ray"]
    if not wanted or cfg.executor.address is not None:
        yield
        return
    from trace_rl.executor.ray_executor import RayExecutor

    cluster = RayExecutor(cfg.executor)
    cluster.connect()
    try:
        yield
    finally:
        cluster.close()


def _num(x: float | None, sign: str = "") -> str:
    """A headline figure to three places ("-" where it was not computed)."""
    return "-" if x is None else f"{x:{sign}.3f}"


def headline(run: RunDir) -> list[str]:
    """Base vs TRACE on the held-out split, with intervals, from evaluate/comparison.json."""
    if not run.comparison.exists():
        return ["no comparison yet (evaluate did not run)"]
    data = Comparison.load(run.comparison)
    lines = [f"held-out {data.env} / {data.split}: {data.tasks} tasks x {data.trials} trials"]
    for arm in data.arms:
        if arm.name not in ("base", "trace"):
            continue
        p1, d1 = arm.at(1), arm.at(1, diff=True)
        if p1 is None:
            lines.append(f"  {arm.name:6s} skipped")
            continue
        text = f"  {arm.name:6s} pass^1 {_num(p1.value)} [{_num(p1.low)}, {_num(p1.high)}]"
        if d1 is not None and arm.name != "base":
            text += f"   diff to base {_num(d1.value, '+')} [{_num(d1.low, '+')}, {_num(d1.high, '+')}]"
        lines.append(text)
    skipped = data.details.get("skipped") or {}
    if "trace" in skipped:
        lines.append(f"  trace  skipped: {skipped['trace']}")
    return lines


def _run_one(name: str, cfg: TraceConfig, run: RunDir, command: str, echo: Echo) -> None:
    """One stage on its own copy of the config (stages add the models they resolve to it); a failure is reported
    as the stage command reported it, then as one line naming the stage."""
    ctx = StageContext(cfg.model_copy(deep=True), run, command=command, echo=echo)
    try:
        run_stage(load_stage(name), ctx)
    except UserError as exc:
        echo(f"error: {exc}", err=True)
        code = 2
    except StageFailed as exc:
        echo(exc.message, err=True)
        code = exc.exit_code
    else:
        return
    # the stage's own exit status stands: 2 for bad input, 1 for work left to retry (infrastructure), 130 interrupted
    raise StageFailed(f"error: stage '{name}' failed (exit {code}); fix it and rerun the same command to resume", code)


def run_pipeline(
    config: Path,
    *,
    command: str,
    only: list[str] | None = None,
    echo: Echo = print_echo,
    executor: str | None = None,
    ray_address: str | None = None,
) -> RunDir:
    """Run the stages in order; stop at the first stage that fails. `command` is the command line recorded in the
    run's manifest (once) and in every stage record.

    `executor` / `ray_address` (the command line's) override the config's executor section for every stage."""
    quiet_defaults()  # training's environment defaults, before any stage imports torch
    cfg = load_config(config)
    cfg.executor = executor_with(cfg.executor, executor, ray_address)
    run = RunDir(cfg.run.runs_dir / cfg.run.name)
    stages = [s for s in STAGES if only is None or s in only]
    unknown = set(only or []) - set(STAGES)
    if unknown:
        raise UserError(f"--stage: unknown stage(s) {', '.join(sorted(unknown))} (known: {', '.join(STAGES)})")
    for note in preflight(cfg, run.root):
        echo(f"preflight: {note}")
    echo(f"preflight: ok · run directory {run.root}")
    started = time.perf_counter()
    with shared_cluster(cfg, stages):
        for stage in stages:
            t0 = time.perf_counter()
            echo(f"── {stage} ──")
            if stage == "route" and not capability_adapters(run):
                echo("route: skipped, no trained adapters (every environment needs attention); evaluate runs the base")
                continue
            _run_one(stage, cfg, run, command, echo)
            echo(f"── {stage} done in {time.perf_counter() - t0:.0f} s")
    echo(f"pipeline finished in {time.perf_counter() - started:.0f} s")
    return run


__all__ = ["STAGES", "STAGE_OBJECTS", "headline", "load_stage", "preflight", "run_pipeline", "shared_cluster"]
