"""Stage 3 over a run directory: train one adapter per calibrated capability environment, resumably.

Inputs: `runs/<name>/envs/<capability>/` folders whose `status.json` says `ready` (passed calibration; the others,
`needs_attention` or unfinished, are listed and skipped), or environments given directly (`--env library:<family>`,
the stand-in until synthesized environments exist). Outputs per capability:

    runs/<name>/adapters/<capability>/   adapter_model.safetensors, adapter_config.json (PEFT), train_config.json,
                                         metrics.jsonl, eval_before.json, eval_after.json, eval.png,
                                         training.png, done.json
    runs/<name>/train/<capability>/      checkpoints/ (TRL/Trainer, for resume), trajectories.jsonl,
                                         eval_before.jsonl, eval_after.jsonl, kept/step-N/ (the adapter at
                                         `keep_fractions` of the steps, for evaluate's score-vs-budget curve)

A finished adapter (weights + done.json) is skipped; an unfinished one resumes from its newest checkpoint, so a killed
`trace-rl train` simply runs again. `mix=True` trains the paper's multi-capability baseline instead: one adapter named
`multi` on a uniform mix of the environments, with the same backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from trace_rl.artifacts.adapters import is_done
from trace_rl.artifacts.layout import ENVS_DIR, MIX_ADAPTER, STATUS_FILE
from trace_rl.artifacts.store import RunDir
from trace_rl.config import ExecutorConfig, TraceConfig
from trace_rl.config.train import TrainConfig
from trace_rl.errors import UserError
from trace_rl.executor import make_executor
from trace_rl.stage import StageContext
from trace_rl.tracking import TrackingSettings, check_available
from trace_rl.training.backends import make_backend
from trace_rl.training.envs import MixTrainEnv
from trace_rl.training.launcher import SUBJOB_ENV, train_job
from trace_rl.training.protocol import AdapterResult, TrainEnv, TrainerBackend
from trace_rl.training.selection import select_envs

STAGE = "train"


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
    tracking: TrackingSettings | None = None,
) -> list[AdapterResult]:
    """Train every selected environment (or their mix) that has no finished adapter yet.

    `executor` (default local): under Ray every capability trains as its own task, in parallel, with its GPUs.
    `tracking` (the run's `report_to`): the backend built here reports its curves there (an injected one: its own)."""
    run = run if isinstance(run, RunDir) else RunDir(Path(run))
    if tracking is not None and tracking.enabled:
        check_available(tracking.report_to)  # before any work
    main = int(os.environ.get("RANK", "0")) == 0 and not os.environ.get(SUBJOB_ENV)
    if main:
        run.ensure(command=command)
    chosen, skipped = select_envs(run, envs=envs, env_spec=env_spec, capability=capability)
    if not chosen:
        if not skipped:
            raise UserError(f"{run.root}: no capability environments (run `trace-rl synthesize --run {run.root}`)")
        # every environment needs attention: nothing to train is a result of the run, recorded, not a crash
        if main:
            with run.stage(STAGE, config=cfg.model_dump(mode="json"), command=command) as record:
                record.summary = {"trained": [], "skipped_not_ready": [f"{n} ({s})" for n, s in skipped]}
        return []
    if mix:
        chosen = {MIX_ADAPTER: MixTrainEnv(MIX_ADAPTER, list(chosen.values()))}
    backend = backend or make_backend(cfg.backend, tracking=tracking)
    results: list[AdapterResult] = []

    executor = (executor or ExecutorConfig()).for_stage("train")

    def train_all() -> dict[str, object]:
        done = {
            n: AdapterResult(capability=n, adapter_dir=run.adapter(n).folder, skipped=True)
            for n in chosen
            if is_done(run.adapter(n))
        }
        jobs = [
            train_job(
                executor,
                name=n,
                backend=backend,
                env=e,
                cfg=cfg.for_capability(n),
                run_root=run.root,
                from_run=envs is None and env_spec is None and not mix,
            )
            for n, e in chosen.items()
            if n not in done
        ]
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
        with run.stage(STAGE, config=cfg.model_dump(mode="json"), command=command) as record:
            record.summary = train_all()
    else:
        train_all()
    return results


def _head(summary: dict | None) -> dict | None:
    if not summary:
        return None
    return {"mean_reward": summary.get("mean_reward"), "success_rate": summary.get("success_rate")}


def result_line(r: AdapterResult) -> str:
    """One line per adapter: steps, folder, and the held-out before/after figures when evaluated."""
    if r.skipped:
        return f"{r.capability}: already trained ({r.adapter_dir})"
    line = f"{r.capability}: {r.steps} steps -> {r.adapter_dir}"
    if r.eval_before and r.eval_after:
        line += (
            f" | held-out reward {r.eval_before['mean_reward']:.3f} -> {r.eval_after['mean_reward']:.3f},"
            f" success {r.eval_before['success_rate']:.3f} -> {r.eval_after['success_rate']:.3f}"
        )
        if "gold_call_logprob" in r.eval_before and "gold_call_logprob" in r.eval_after:
            line += (
                f", log p(gold call) {r.eval_before['gold_call_logprob']:.1f}"
                f" -> {r.eval_after['gold_call_logprob']:.1f}"
            )
    return line


@dataclass(frozen=True)
class TrainStage:
    """The train stage: the run's calibrated environments (or `capability` alone), or the environments `env_spec`
    names (`library:<family>[,...]`); `mix` trains one adapter on their mix (the multi-capability baseline)."""

    capability: str | None = None
    env_spec: str | None = None
    mix: bool = False
    name: ClassVar[str] = STAGE

    def section(self, config: TraceConfig) -> TrainConfig:
        return config.train

    def run(self, ctx: StageContext, section: TrainConfig) -> list[AdapterResult]:
        only = {"capability": self.capability, "env_spec": self.env_spec, "mix": self.mix}
        tracking = TrackingSettings.from_run(ctx.config.run, ctx.run.root)
        results = run_train(ctx.run, section, **only, command=ctx.command, executor=ctx.executor, tracking=tracking)
        if not results:
            ctx.echo(f"nothing to train: no capability environment passed calibration (see {ENVS_DIR}/*/{STATUS_FILE})")
        for r in results:
            ctx.echo(result_line(r))
        return results


TRAIN = TrainStage()
