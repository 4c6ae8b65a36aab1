"""Stage 1 (`trace-rl rollout`): check everything, then roll the policy out on every (task, trial) of a split.

Systemic problems (unknown environment, split, task or model, a server that does not serve the requested adapter,
a domain without a scripted user) raise `UserError` before the run directory is touched. Then: the manifest records
the command, `rollout/plans.json` the planned episodes, and `run_rollout` appends trajectories to
`rollout/trajectories.jsonl`. Rerunning the same command completes what is missing and retries infra failures.
`ROLLOUT` is the stage object the CLI and the pipeline call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Iterator
from typing import Any

from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.config import ModelConfig, RolloutConfig, TraceConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.plan import STAGE, check_identity, plan_jobs, record_plan
from trace_rl.engine.progress import Progress, ProgressMode, make_progress
from trace_rl.engine.runner import EpisodeFactory, RolloutResult, run_rollout
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.executor.base import Executor
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.registry import ModelClients
from trace_rl.models.served import BASE_MODEL_NAMES, check_served
from trace_rl.stage import StageContext, StageFailed
from trace_rl.types import Task


class IncompleteRollout(Exception):
    """Episodes are left to retry or start; the stage is recorded as failed with its summary."""


@contextlib.contextmanager
def rollout_lock(run_dir: RunDir) -> Iterator[None]:
    """One rollout command per run directory at a time (an OS file lock: released even by kill -9)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    run_dir.rollout_lock.parent.mkdir(parents=True, exist_ok=True)
    with run_dir.rollout_lock.open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another rollout is writing to {run_dir.root}; wait for it or use another --run") from None
        yield


def select_tasks(tasks: list[Task], task_ids: list[str] | None, limit: int | None, where: str) -> list[Task]:
    if task_ids:
        by_id = {t.id: t for t in tasks}
        unknown = [t for t in task_ids if t not in by_id]
        if unknown:
            raise UserError(f"{where}: unknown task id(s) {', '.join(unknown[:5])}")
        tasks = [by_id[t] for t in dict.fromkeys(task_ids)]
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise UserError(f"{where}: no tasks to run")
    return tasks


def _redacted(cfg: TraceConfig) -> dict[str, Any]:
    data = json.loads(json.dumps(cfg.model_dump(mode="python"), default=str))
    for model in data.get("models", {}).values():
        if model.get("api_key"):
            model["api_key"] = "***"
    return data


def _sampling(cfg: TraceConfig, model_cfg: ModelConfig | None) -> SamplingParams:
    r = cfg.rollout
    base = model_cfg or ModelConfig()
    return SamplingParams(
        temperature=r.temperature if r.temperature is not None else base.temperature,
        top_p=base.top_p,
        top_k=base.top_k,
        max_tokens=r.max_tokens if r.max_tokens is not None else base.max_tokens,
    )


def rollout(
    cfg: TraceConfig,
    run_dir: RunDir,
    *,
    command: str | None = None,
    progress: ProgressMode | Progress = "auto",
    clients: dict[str, ModelClient] | None = None,
) -> RolloutResult:
    """Roll out `cfg.rollout.policy` on `cfg.env`; `clients` (name -> client) replaces building clients (tests)."""
    r, env_cfg = cfg.rollout, cfg.env
    clients = ModelClients(cfg, clients)  # the given ones (tests) kept; the others built on first use

    # -- everything that can be wrong with the request is found before any work ---------------------------------
    domain = load_domain(env_cfg.name, env_cfg)
    if r.split not in domain.splits():
        raise UserError(f"environment '{env_cfg.name}' has no split '{r.split}' (splits: {', '.join(domain.splits())})")
    tasks = select_tasks(domain.tasks(r.split), r.task_ids, r.task_limit, f"{env_cfg.name}/{r.split}")

    def model_cfg(name: str | None) -> ModelConfig | None:
        if name is None or (name in clients and name not in cfg.models):
            return None
        return cfg.model(name)

    policy_cfg = model_cfg(r.policy)
    user_name = None if r.user == "scripted" else r.user
    user_cfg = model_cfg(user_name)
    judge_cfg = model_cfg(r.judge)
    if user_name is None:
        unscripted = [t.id for t in tasks if domain.scripted_user(t) is None]
        if len(unscripted) == len(tasks):
            raise UserError(f"environment '{env_cfg.name}' has no scripted user: pass --user-model (an LLM user)")
        if unscripted:
            shown = ", ".join(unscripted[:5]) + (" ..." if len(unscripted) > 5 else "")
            raise UserError(
                f"{env_cfg.name}/{r.split}: {len(unscripted)} of {len(tasks)} tasks have no scripted user ({shown}); "
                "pass --user-model (an LLM user) or pick tasks with --task"
            )
    if user_name is not None and getattr(domain, "guidelines", None) is None:
        raise UserError(f"environment '{env_cfg.name}' has no user guidelines, so it cannot use an LLM user simulator")
    local = policy_cfg is not None and policy_cfg.kind in ("local", "tiny")
    if local and r.adapter not in (None, *BASE_MODEL_NAMES) and r.adapter not in policy_cfg.adapters:
        raise UserError(f"model '{r.policy}' has no adapter '{r.adapter}' (set models.{r.policy}.adapters)")
    for name, mcfg, adapter in (
        (r.policy, policy_cfg, r.adapter),
        (user_name, user_cfg, None),
        (r.judge, judge_cfg, None),
    ):
        if name is not None and mcfg is not None:
            check_served(name, mcfg, adapter)

    sampling = _sampling(cfg, policy_cfg)
    model_label = (policy_cfg.model if policy_cfg is not None else "") or r.policy
    user_label = "scripted" if user_name is None else ((user_cfg.model if user_cfg else "") or user_name)
    identity = {
        "policy": model_label,
        "adapter": r.adapter,
        "user": user_label,
        "judge": r.judge,
        "seed": r.seed,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "max_steps": env_cfg.max_steps,
        "max_errors": env_cfg.max_errors,
        "task_set": env_cfg.task_set,
        "reward_basis": env_cfg.reward_basis,
    }
    check_identity(run_dir, env_cfg.name, r.split, identity)

    factory = EpisodeFactory(
        domain=domain,
        env_name=env_cfg.name,
        split=r.split,
        client=clients[r.policy],
        model_name=model_label,
        adapter=None if r.adapter in BASE_MODEL_NAMES else r.adapter,
        sampling=sampling,
        limits=EpisodeLimits(max_steps=env_cfg.max_steps, max_errors=env_cfg.max_errors, timeout_s=r.episode_timeout_s),
        user_client=clients[user_name] if user_name else None,
        user_model=user_label if user_name else None,
        user_sampling=SamplingParams(temperature=0.0, max_tokens=user_cfg.max_tokens if user_cfg else 512),
        judge=clients[r.judge] if r.judge else None,
        token_ids=r.token_ids,
        metadata={"run": run_dir.name, "user": user_label},
    )

    from trace_rl.executor import make_executor

    executor = make_executor(cfg.executor, STAGE)  # ray missing: a one-line error before the run dir is touched

    # -- the run directory explains itself: manifest, plan, stage record ----------------------------------------
    try:
        with rollout_lock(run_dir):
            return _run(cfg, run_dir, factory, tasks, identity, command, progress, clients, executor)
    finally:
        executor.close()


def _run(
    cfg: TraceConfig,
    run_dir: RunDir,
    factory: EpisodeFactory,
    tasks: list[Task],
    identity: dict[str, Any],
    command: str | None,
    progress: ProgressMode | Progress,
    clients: ModelClients,
    executor: Executor | None = None,
) -> RolloutResult:
    r, env_cfg = cfg.rollout, cfg.env
    run_dir.ensure(_redacted(cfg), command)
    record_plan(run_dir, env_cfg.name, r.split, tasks, r.trials, r.seed, identity)
    jobs = plan_jobs(env_cfg.name, r.split, tasks, r.trials, r.seed)
    store = JsonlStore(run_dir.trajectories)
    reporter = make_progress(progress) if isinstance(progress, str) else progress

    async def main() -> RolloutResult:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)  # type: ignore[union-attr]
        try:
            return await run_rollout(
                jobs,
                factory,
                store,
                concurrency=r.concurrency,
                progress=reporter,
                stop_after_infra=r.stop_after_infra or None,
                label=f"{env_cfg.name}/{r.split}",
                executor=executor,
            )
        finally:
            await clients.aclose()

    stage_cfg = {**r.model_dump(mode="json"), "env": env_cfg.name, "identity": identity}
    try:
        with run_dir.stage(STAGE, stage_cfg, command=command) as record:
            try:
                result = asyncio.run(main())
            except asyncio.CancelledError:
                raise KeyboardInterrupt from None
            record.summary = result.as_dict()
            if not result.complete:
                raise IncompleteRollout
    except IncompleteRollout:
        pass
    return result


def summary_line(result: RolloutResult) -> str:
    rate = f"{result.successes / result.scored:.1%}" if result.scored else "-"
    return (
        f"rollout {result.label}: {result.ran} episodes run, {result.resumed} already done, "
        f"{result.planned} planned · success {rate} ({result.successes}/{result.scored} scored this run) · "
        f"infra failures {result.infra} · {result.elapsed_s:.1f} s"
    )


class RolloutStage:
    """The rollout stage: `rollout(...)` on the context's config with `section` as its rollout section."""

    name = STAGE

    def section(self, config: TraceConfig) -> RolloutConfig:
        return config.rollout

    def run(self, ctx: StageContext, section: RolloutConfig) -> RolloutResult:
        result = rollout(ctx.config, ctx.run, command=ctx.command, progress=ctx.progress)
        ctx.echo(summary_line(result))
        ctx.echo(f"trajectories: {ctx.run.trajectories}")
        if not result.complete:
            left = result.infra + result.not_started
            why = f" ({result.stopped})" if result.stopped else ""
            raise StageFailed(f"incomplete: {left} episode(s) left{why}; rerun the same command to retry them")
        ctx.echo(f"next: trace-rl report --run {ctx.run.root}")
        return result


ROLLOUT = RolloutStage()
