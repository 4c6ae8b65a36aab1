"""The Ray executor on a local CPU cluster: the same artefacts as the local executor, resume, lost workers.

Every test compares against the local executor on the same inputs: the library domain played by `GoldClient`
(deterministic, fast), 12 train tasks x 3 trials. A worker that SIGKILLs itself mid-rollout must cost nothing: each
(task, trial) is stored exactly once, none is an infrastructure failure, and the store equals the local one.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.config import ExecutorConfig
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.config.train import TrainConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.plan import plan_jobs
from trace_rl.engine.runner import EpisodeFactory, run_rollout
from trace_rl.envs.registry import load_domain
from trace_rl.evaluate.stage import run_evaluate
from trace_rl.rollout.stage import rollout
from trace_rl.train.stage import run_train

from .helpers import GoldClient, MarkerBackend, NamedEnv, config, openings, stable

TRAJ = "rollout/trajectories.jsonl"
PLANNED = 36  # 12 tasks x 3 trials


@pytest.fixture(scope="module")
def by_opening() -> dict[str, Any]:
    return openings()


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, by_opening) -> dict[str, Any]:
    """The local executor's rollout store, the reference every Ray run must reproduce."""
    root = tmp_path_factory.mktemp("local")
    cfg = config(root)
    run = RunDir(root / "r")
    result = rollout(cfg, run, progress="none", clients={"policy": GoldClient(by_opening)})
    assert result.complete and result.ran == PLANNED
    return {k: stable(v) for k, v in run.jsonl(TRAJ).latest().items()}


def assert_exactly_once(store: JsonlStore, reference: dict[str, Any]) -> None:
    records = store.records()
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == PLANNED  # no (task, trial) written twice, none missing
    assert all(r["infra_error"] is None for r in records)
    assert {r["id"]: stable(r) for r in records} == reference


def test_rollout_on_ray_matches_local_and_resumes(tmp_path: Path, ray_cluster, by_opening, local_reference) -> None:
    cfg = config(tmp_path, kind="ray", num_workers=2)
    run = RunDir(tmp_path / "r")
    driver_client = GoldClient(by_opening, latency_s=0.002)
    result = rollout(cfg, run, progress="none", clients={"policy": driver_client})
    assert result.complete and result.ran == PLANNED and 0 < result.successes < PLANNED
    assert driver_client.calls == 0  # every episode ran in a worker process
    assert_exactly_once(run.jsonl(TRAJ), local_reference)
    plans = json.loads((run.root / "rollout" / "plans.json").read_text())["library/train"]
    assert plans["trials"] == 3 and len(plans["task_ids"]) == 12
    assert run.manifest().stages["rollout"].status == "done"

    before = (run.root / TRAJ).read_bytes()
    again = rollout(cfg, run, progress="none", clients={"policy": driver_client})
    assert (again.ran, again.resumed) == (0, PLANNED) and (run.root / TRAJ).read_bytes() == before

    # a partial store (a kill of the whole command): only the missing episodes run, on Ray
    lines = before.splitlines(keepends=True)
    (run.root / TRAJ).write_bytes(b"".join(lines[:20]))
    third = rollout(cfg, run, progress="none", clients={"policy": driver_client})
    assert (third.ran, third.resumed) == (PLANNED - 20, 20)
    assert_exactly_once(run.jsonl(TRAJ), local_reference)


@pytest.mark.parametrize("max_restarts", [4, 0], ids=["actor-restarts", "rerouted-to-another-worker"])
def test_a_worker_killed_mid_rollout_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, ray_cluster, by_opening, local_reference, max_restarts: int
) -> None:
    from trace_rl.executor.ray_executor import RayExecutor

    marker = tmp_path / "killed.pid"
    client = GoldClient(by_opening, latency_s=0.005, kill_marker=marker, kill_after_calls=8)
    domain = load_domain("library", config(tmp_path).env)
    tasks = domain.tasks("train")
    factory = EpisodeFactory(
        domain=domain,
        env_name="library",
        split="train",
        client=client,
        model_name="gold",
        limits=EpisodeLimits(max_steps=30, max_errors=5),
        metadata={"run": "r", "user": "scripted"},
    )
    store = JsonlStore(tmp_path / "r" / TRAJ)
    executor = RayExecutor(ExecutorConfig(kind="ray", num_workers=2, max_restarts=max_restarts, max_retries=3))
    try:
        pids = None

        async def main():
            nonlocal pids
            jobs = plan_jobs("library", "train", tasks, 3, 300)
            return await run_rollout(jobs, factory, store, concurrency=6, executor=executor)

        result = asyncio.run(main())
        pids = executor.worker_pids() if max_restarts else None
    finally:
        executor.close()
    killed = int(marker.read_text())
    assert killed != os.getpid()  # a worker died, not the test
    assert result.complete and result.ran == PLANNED and result.infra == 0
    if max_restarts:
        assert killed not in pids  # the actor came back in a new process
    else:
        assert executor.lost >= 1 and len(executor.dead) == 1  # its episodes were sent to the other worker
    assert_exactly_once(store, {k: v for k, v in local_reference.items()})


def test_evaluate_on_ray_matches_local(tmp_path: Path, ray_cluster, by_opening) -> None:
    ecfg = EvaluateConfig.model_validate(
        {"arms": ["base"], "trials": 2, "concurrency": 4, "samples": 100, "curve": {"enabled": False}}
    )
    out = {}
    for kind in ("local", "ray"):
        cfg = config(tmp_path / kind, kind=kind, num_workers=2)
        run = RunDir(tmp_path / kind / "r")
        run.ensure(command="test")
        comparison = run_evaluate(run, cfg, ecfg, clients={"policy": GoldClient(by_opening)})
        base = comparison.arms[0]
        out[kind] = (
            {k: stable(v) for k, v in run.jsonl("evaluate/arms/base.jsonl").latest().items()},
            [(p.k, p.value, p.low, p.high) for p in base.pass_k],
        )
        assert len(run.jsonl("evaluate/arms/base.jsonl").records()) == 16  # 8 test tasks x 2 trials, once each
    assert out["ray"] == out["local"]


def test_trainings_run_in_parallel_as_ray_tasks(tmp_path: Path, ray_cluster) -> None:
    envs = {"alpha": NamedEnv("alpha"), "beta": NamedEnv("beta")}
    ex = ExecutorConfig(kind="ray", cpus_per_train_job=1, gpus_per_train_job=0)
    run = RunDir(tmp_path / "run")
    results = run_train(run, TrainConfig(max_steps=3), envs=envs, backend=MarkerBackend(delay_s=1.5), executor=ex)
    assert [r.capability for r in results] == ["alpha", "beta"] and all(r.steps == 3 for r in results)
    done = [json.loads((run.root / "adapters" / n / "done.json").read_text()) for n in envs]
    assert len({d["pid"] for d in done} | {os.getpid()}) == 3  # two worker processes, not the driver
    assert max(d["started"] for d in done) < min(d["ended"] for d in done)  # they overlapped: in parallel
    assert run.manifest().stages["train"].summary["trained"] == ["alpha", "beta"]
    again = run_train(run, TrainConfig(max_steps=3), envs=envs, backend=MarkerBackend(), executor=ex)
    assert all(r.skipped for r in again)  # resume: finished adapters are not trained again


class FailingBackend(MarkerBackend):
    def train(self, env, cfg, *, adapter_dir, work_dir):
        if env.name == "beta":
            from trace_rl.errors import UserError

            raise UserError("beta: no calibrated environment")
        return super().train(env, cfg, adapter_dir=adapter_dir, work_dir=work_dir)


def test_a_failed_training_fails_the_stage_after_the_others_finish(tmp_path: Path, ray_cluster) -> None:
    from ray import cloudpickle

    from trace_rl.errors import UserError

    cloudpickle.register_pickle_by_value(__import__(__name__))
    envs = {"alpha": NamedEnv("alpha"), "beta": NamedEnv("beta")}
    run = RunDir(tmp_path / "run")
    with pytest.raises(UserError, match="beta: no calibrated"):  # still one line, not a Ray traceback
        run_train(
            run, TrainConfig(max_steps=1), envs=envs, backend=FailingBackend(), executor=ExecutorConfig(kind="ray")
        )
    assert (run.root / "adapters" / "alpha" / "done.json").is_file()
    assert run.manifest().stages["train"].status == "failed"
