"""Stage 3 over a run directory: train one adapter per calibrated capability environment, resumably.

Inputs: `runs/<name>/envs/<capability>/` folders whose `status.json` says `ready` (passed calibration; the others,
`needs_attention` or unfinished, are listed and skipped), or environments given directly (`--env library:<family>`,
the stand-in until synthesized environments exist). Outputs per capability:

    runs/<name>/adapters/<capability>/   adapter_model.safetensors, adapter_config.json (PEFT), train_config.json,
                                         metrics.jsonl, eval_before.json, eval_after.json, eval.png,
                                         training.png, done.json
    runs/<name>/train/<capability>/      checkpoints/ (TRL/Trainer, for resume), trajectories.jsonl,
                                         eval_before.jsonl, eval_after.jsonl

A finished adapter (weights + done.json) is skipped; an unfinished one resumes from its newest checkpoint, so a killed
`trace-rl train` simply runs again. `mix=True` trains the paper's multi-capability baseline instead: one adapter named
`multi` on a uniform mix of the environments, with the same backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trace_rl.config import ExecutorConfig
from trace_rl.errors import UserError
from trace_rl.executor import make_executor
from trace_rl.training.launcher import SUBJOB_ENV, train_job
from trace_rl.artifacts.store import RunDir
from trace_rl.config.train import TrainConfig
from trace_rl.training.envs import MixTrainEnv, env_from_spec, load_synthesized_env, run_envs
from trace_rl.training.protocol import AdapterResult, TrainEnv, TrainerBackend
from trace_rl.training.trl_backend import TRLBackend, is_done

MIX_NAME = "multi"


def make_backend(name: str) -> TrainerBackend:
    if name == "trl":
        return TRLBackend()
    raise UserError(f"unknown training backend '{name}' (trl)")


def select_envs(
    run: RunDir,
    *,
    envs: Mapping[str, TrainEnv] | None = None,
    env_spec: str | None = None,
    capability: str | None = None,
) -> tuple[dict[str, TrainEnv], list[tuple[str, str]]]:
    """The environments to train (name → env) and the run's environments skipped with their status."""
    skipped: list[tuple[str, str]] = []
    if envs is not None:
        chosen = dict(envs)
    elif env_spec is not None:
        built = [env_from_spec(one.strip()) for one in env_spec.split(",") if one.strip()]
        chosen = {env.name: env for env in built}
    else:
        ready, not_ready = run_envs(run.root)
        skipped = [(folder.name, status) for folder, status in not_ready]
        names = [f.name for f in ready]
        if capability is not None and capability not in names:
            known = ", ".join(names) or "none passed calibration"
            raise UserError(f"capability '{capability}' has no calibrated environment in {run.root}/envs ({known})")
        chosen = {f.name: load_synthesized_env(f) for f in ready if capability in (None, f.name)}
    if capability is not None:
        if capability not in chosen:
            raise UserError(f"unknown capability '{capability}' (available: {', '.join(chosen) or 'none'})")
        chosen = {capability: chosen[capability]}
    return chosen, skipped


def run_train(
    run: RunDir | Path,
    cfg: TrainConfig,
    *,
    capability: str | None = None,
    envs: Mapping[str, TrainEnv] | None = None,
    env_spec: str | None = None,
    mix: bool = False,
    backend: TrainerBackend | None = None,
    command: str | None = None,
    executor: ExecutorConfig | None = None,
) -> list[AdapterResult]:
    """Train every selected environment (or their mix) that has no finished adapter yet.

    `executor` (default local): under Ray every capability trains as its own task, in parallel, with its GPUs."""
    run = run if isinstance(run, RunDir) else RunDir(Path(run))
    main = int(os.environ.get("RANK", "0")) == 0 and not os.environ.get(SUBJOB_ENV)
    if main:
        run.ensure(command=command)
    chosen, skipped = select_envs(run, envs=envs, env_spec=env_spec, capability=capability)
    if not chosen:
        if not skipped:
            raise UserError(f"{run.root}: no capability environments (run `trace-rl synthesize --run {run.root}`)")
        # every environment needs attention: nothing to train is a result of the run, recorded, not a crash
        if main:
            with run.stage("train", config=cfg.model_dump(mode="json")) as record:
                record.summary = {"trained": [], "skipped_not_ready": [f"{n} ({s})" for n, s in skipped]}
        return []
    if mix:
        chosen = {MIX_NAME: MixTrainEnv(MIX_NAME, list(chosen.values()))}
    backend = backend or make_backend(cfg.backend)
    results: list[AdapterResult] = []

    executor = (executor or ExecutorConfig()).for_stage("train")

    def train_all() -> dict[str, object]:
        done = {n: AdapterResult(capability=n, adapter_dir=run.root / "adapters" / n, skipped=True)
                for n in chosen if is_done(run.root / "adapters" / n)}  # fmt: skip
        jobs = [train_job(executor, name=n, backend=backend, env=e, cfg=cfg, run_root=run.root,
                          from_run=envs is None and env_spec is None and not mix)
                for n, e in chosen.items() if n not in done]  # fmt: skip
        ex = make_executor(executor)
        try:
            trained = dict(zip([n for n in chosen if n not in done], ex.run_jobs(jobs), strict=True))
        finally:
            ex.close()
        results.extend(done.get(n) or trained[n] for n in chosen)
        return {
            "trained": [r.capability for r in results if not r.skipped],
            "skipped_done": [r.capability for r in results if r.skipped],
            "skipped_not_ready": [f"{n} ({s})" for n, s in skipped],
            "adapters": {
                r.capability: {"steps": r.steps, "eval_before": _head(r.eval_before), "eval_after": _head(r.eval_after)}
                for r in results
                if not r.skipped
            },
        }

    if main:
        with run.stage("train", config=cfg.model_dump(mode="json")) as record:
            record.summary = train_all()
    else:
        train_all()
    return results


def _head(summary: dict | None) -> dict | None:
    if not summary:
        return None
    return {"mean_reward": summary.get("mean_reward"), "success_rate": summary.get("success_rate")}
