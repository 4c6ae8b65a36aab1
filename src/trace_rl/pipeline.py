"""`trace-rl run --config <file>`: every stage in order, each resuming what is already done.

rollout (train split) → diagnose → synthesize → train → route → evaluate (held-out split) → report. The pipeline is only
the stage commands called in order with the same config and run directory, so a stage can also be rerun alone. Before
any compute it checks the config (every stage section), the environment's data, the model endpoints and the disk.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from trace_rl.config import EXECUTOR_STAGES, TraceConfig, executor_with, format_validation_error, load_config
from trace_rl.errors import UserError
from trace_rl.artifacts.store import RunDir

STAGES = ("rollout", "diagnose", "synthesize", "train", "route", "evaluate", "report")
MIN_FREE_BYTES = 2 * 1024**3  # adapters, checkpoints and a converted model


def stage_section_validators() -> dict[str, Callable[[TraceConfig], Any]]:
    """Each stage's own validation of its `stages.<name>` section (imported lazily: some pull torch)."""
    from trace_rl.config.diagnose import diagnose_config
    from trace_rl.config.evaluate import evaluate_config
    from trace_rl.route.stage import route_config
    from trace_rl.config.synthesize import synthesize_config
    from trace_rl.config.train import TrainConfig

    def train(cfg: TraceConfig) -> Any:
        try:
            return TrainConfig.model_validate(cfg.stages.get("train") or {})
        except ValidationError as err:
            raise UserError(format_validation_error(err, "stages.train")) from None

    return {
        "diagnose": lambda cfg: diagnose_config(cfg.stages.get("diagnose")),
        "synthesize": synthesize_config,
        "train": train,
        "route": route_config,
        "evaluate": evaluate_config,
    }


def _check_endpoint(name: str, base_url: str, timeout_s: float = 5.0) -> None:
    url = base_url.rstrip("/") + "/models"
    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise UserError(f"model '{name}': endpoint {base_url} is not reachable ({type(exc).__name__})") from None


def preflight(cfg: TraceConfig, run_root: Path) -> list[str]:
    """Check everything a run needs before spending compute; returns notes, raises UserError naming what is missing."""
    notes: list[str] = []
    unknown = set(cfg.stages) - set(STAGES)
    if unknown:
        raise UserError(f"stages: unknown section(s) {', '.join(sorted(unknown))} (known: {', '.join(STAGES)})")
    for validate in stage_section_validators().values():
        validate(cfg)
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


def stage_args(
    stage: str, config: Path, run_root: Path, executor: str | None = None, ray_address: str | None = None
) -> list[str]:
    if stage == "report":
        return ["report", "--run", str(run_root)]
    args = [stage, "--config", str(config), "--run", str(run_root)]
    if stage in EXECUTOR_STAGES:
        args += ["--executor", executor] if executor else []
        args += ["--ray-address", ray_address] if ray_address else []
    return args


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


def trained_adapters(run: RunDir) -> list[Path]:
    return sorted(p.parent for p in (run.root / "adapters").glob("*/adapter_model.safetensors"))


def headline(run: RunDir) -> list[str]:
    """Base vs TRACE on the held-out split, with intervals, from evaluate/comparison.json."""
    path = run.root / "evaluate" / "comparison.json"
    if not path.exists():
        return ["no comparison yet (evaluate did not run)"]
    data = json.loads(path.read_text())
    lines = [
        f"held-out {data.get('env')} / {data.get('split')}: {data.get('tasks')} tasks x {data.get('trials')} trials"
    ]
    for arm in data.get("arms", []):
        if arm["name"] not in ("base", "trace"):
            continue
        p1 = next((r for r in arm.get("pass_k", []) if r["k"] == 1), None)
        d1 = next((r for r in arm.get("diff_to_base", []) if r["k"] == 1), None)
        if p1 is None:
            lines.append(f"  {arm['name']:6s} skipped")
            continue
        text = f"  {arm['name']:6s} pass^1 {p1['value']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}]"
        if d1 is not None and arm["name"] != "base":
            text += f"   diff to base {d1['value']:+.3f} [{d1['low']:+.3f}, {d1['high']:+.3f}]"
        lines.append(text)
    skipped = (data.get("details") or {}).get("skipped") or {}
    if "trace" in skipped:
        lines.append(f"  trace  skipped: {skipped['trace']}")
    return lines


def run_pipeline(
    config: Path,
    *,
    invoke: Callable[[list[str]], int],
    only: list[str] | None = None,
    echo: Callable[[str], None] = print,
    executor: str | None = None,
    ray_address: str | None = None,
) -> RunDir:
    """Run the stages in order through `invoke` (the CLI's main); stop at the first stage that fails.

    `executor` / `ray_address` (the command line's) override the config's executor section for every stage."""
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
            if stage == "route" and not trained_adapters(run):
                echo("route: skipped, no trained adapters (every environment needs attention); evaluate runs the base")
                continue
            code = invoke(stage_args(stage, config, run.root, executor, ray_address))
            if code != 0:
                raise UserError(f"stage '{stage}' failed (exit {code}); fix it and rerun the same command to resume")
            echo(f"── {stage} done in {time.perf_counter() - t0:.0f} s")
    echo(f"pipeline finished in {time.perf_counter() - started:.0f} s")
    return run
