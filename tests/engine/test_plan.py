"""Keys, trial seeds, resume selection and the plan file."""

from __future__ import annotations

import pytest

from trace_rl.artifacts.trajectories import read_rollout_plans
from trace_rl.engine.plan import check_identity, pending_jobs, plan_jobs, record_plan, trial_seeds
from trace_rl.errors import UserError
from trace_rl.types import Task


def tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}") for i in range(n)]


def test_trial_seeds_are_stable_prefixes():
    assert trial_seeds(300, 5)[:3] == trial_seeds(300, 3)
    assert trial_seeds(300, 3) != trial_seeds(301, 3)
    assert len(set(trial_seeds(300, 10))) == 10


def test_jobs_are_trial_major_with_ids():
    jobs = plan_jobs("tau2:mock", "train", tasks(2), 2, 300)
    assert [j.id for j in jobs] == [
        "tau2:mock/train/t0/0",
        "tau2:mock/train/t1/0",
        "tau2:mock/train/t0/1",
        "tau2:mock/train/t1/1",
    ]
    assert jobs[0].seed == jobs[1].seed != jobs[2].seed


def test_pending_skips_done_and_retries_infra():
    jobs = plan_jobs("e", "s", tasks(3), 1, 0)
    latest = {"e/s/t0/0": {"infra_error": None}, "e/s/t1/0": {"infra_error": "timeout: x"}}
    assert [j.id for j in pending_jobs(jobs, latest)] == ["e/s/t1/0", "e/s/t2/0"]


def test_plan_file_merges_and_guards_identity(run_dir):
    ident = {"policy": "m", "seed": 300}
    record_plan(run_dir, "e", "s", tasks(2), 1, 300, ident)
    record_plan(run_dir, "e", "s", tasks(3)[1:], 3, 300, ident)
    plan = read_rollout_plans(run_dir)["e/s"]
    assert plan.task_ids == ["t0", "t1", "t2"] and plan.trials == 3
    assert plan.trial_seeds == trial_seeds(300, 3)
    check_identity(run_dir, "e", "s", ident)
    check_identity(run_dir, "e", "other", {"policy": "x"})
    with pytest.raises(UserError, match="policy: 'm' -> 'x'"):
        check_identity(run_dir, "e", "s", {"policy": "x", "seed": 300})
