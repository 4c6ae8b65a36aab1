"""What a rollout should produce, and what is still missing: episode keys, trial seeds, the plan file, resume.

An episode is the pair (task, trial) of one environment and split; its key, which is also the trajectory id, is
`<env>/<split>/<task_id>/<trial>`. Trial seeds follow τ²-bench: a `random.Random(seed)` draws one seed per trial, so
trial t has the same seed for every task and raising `trials` later keeps the seeds of the trials already run.

`rollout/plans.json` records, per `<env>/<split>`, every (task, trial) pair ever asked for and who rolls it out
(policy, adapter, user, seed, sampling). Reports count missing pairs against it, so an episode never leaves a
denominator silently; a rerun with a different identity is refused rather than mixing two agents in one run.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import RolloutPlan, read_rollout_plans, write_rollout_plans
from trace_rl.errors import UserError
from trace_rl.types import Task

STAGE = "rollout"


def episode_id(env: str, split: str, task_id: str, trial: int) -> str:
    return f"{env}/{split}/{task_id}/{trial}"


def trial_seeds(seed: int, trials: int) -> list[int]:
    """One seed per trial, drawn as τ²-bench does; a prefix of the list never changes when `trials` grows."""
    rng = random.Random(seed)
    return [rng.randint(0, 1_000_000) for _ in range(trials)]


@dataclass(frozen=True)
class Job:
    """One episode to run."""

    task: Task
    trial: int
    seed: int
    id: str


def plan_jobs(env: str, split: str, tasks: list[Task], trials: int, seed: int) -> list[Job]:
    """Every (task, trial) pair, trial-major: a partial run has whole trials, so pass^1 is meaningful early."""
    seeds = trial_seeds(seed, trials)
    return [
        Job(task=task, trial=trial, seed=seeds[trial], id=episode_id(env, split, task.id, trial))
        for trial in range(trials)
        for task in tasks
    ]


def is_done(record: dict[str, Any] | None) -> bool:
    """A key is done when its latest record exists and is not an infrastructure failure."""
    return record is not None and record.get("infra_error") is None


def pending_jobs(jobs: list[Job], latest: dict[str, dict[str, Any]]) -> list[Job]:
    """The jobs still to run: never written, or whose latest record is an infrastructure failure (a retry)."""
    return [job for job in jobs if not is_done(latest.get(job.id))]


# -- the plan file ---------------------------------------------------------------------------------------------------


def check_identity(run_dir: RunDir, env: str, split: str, identity: dict[str, Any]) -> None:
    """Refuse to mix agents: a rerun into the same run must use the same policy, adapter, user, seed and sampling."""
    previous = read_rollout_plans(run_dir).get(f"{env}/{split}")
    if previous is None:
        return
    old = previous.identity
    changed = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
    if changed:
        details = "; ".join(f"{k}: {old.get(k)!r} -> {identity.get(k)!r}" for k in changed)
        raise UserError(
            f"run {run_dir.root} already holds {env}/{split} rollouts by a different setup ({details}); "
            "use another --run, or the same settings to resume"
        )


def record_plan(
    run_dir: RunDir, env: str, split: str, tasks: list[Task], trials: int, seed: int, identity: dict[str, Any]
) -> RolloutPlan:
    """Merge this command's (task, trial) pairs into plans.json: the union of tasks, the largest trial count."""
    plans = read_rollout_plans(run_dir)
    key = f"{env}/{split}"
    old = plans.get(key)
    task_ids = list(old.task_ids) if old else []
    known = set(task_ids)
    task_ids += [t.id for t in tasks if t.id not in known]
    n_trials = max(trials, old.trials if old else 0)
    plans[key] = RolloutPlan(
        env=env,
        split=split,
        task_ids=task_ids,
        trials=n_trials,
        seed=seed,
        trial_seeds=trial_seeds(seed, n_trials),
        identity=identity,
        updated_at=time.time(),
    )
    write_rollout_plans(run_dir, plans)
    return plans[key]
