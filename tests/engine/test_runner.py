"""The engine: overlapping episodes, one record per key, resume, infra failures retried, crashes as data."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from tests.rollout.toy import ToyDomain, ToyPolicy

from trace_rl.artifacts.store import JsonlStore
from trace_rl.engine.plan import plan_jobs, trial_seeds
from trace_rl.engine.runner import EpisodeFactory, run_rollout
from trace_rl.errors import UserError
from trace_rl.types import TerminationReason, Trajectory


def factory(domain: ToyDomain, policy: ToyPolicy, **kw) -> EpisodeFactory:
    return EpisodeFactory(domain=domain, env_name="toy", split="train", client=policy, model_name="toy", **kw)


def run(domain, policy, store, trials=1, **kw):
    jobs = plan_jobs("toy", "train", domain.tasks("train"), trials, 300)
    return asyncio.run(run_rollout(jobs, factory(domain, policy), store, **kw))


@pytest.fixture
def store(tmp_path) -> JsonlStore:
    return JsonlStore(tmp_path / "trajectories.jsonl")


def test_concurrent_episodes_overlap(toy, store):
    policy = ToyPolicy(delay_s=0.05)
    started = time.perf_counter()
    result = run(toy, policy, store, trials=2, concurrency=4)
    elapsed = time.perf_counter() - started
    # 12 episodes x 2 model calls x 50 ms = 1.2 s serially; 4 in flight at once
    assert policy.max_in_flight == 4
    assert elapsed < 0.9
    assert result.ran == 12 and result.scored == 12 and result.successes == 12 and result.complete


def test_one_record_per_episode_with_identity(toy, store):
    run(toy, ToyPolicy(), store, trials=2, concurrency=3)
    records = store.records()
    assert len(records) == 12 and len(store.latest()) == 12
    seeds = trial_seeds(300, 2)
    for r in records:
        traj = Trajectory.model_validate(r)
        assert traj.id == f"toy/train/{traj.task_id}/{traj.trial}"
        assert traj.seed == seeds[traj.trial] and traj.model == "toy"
        assert traj.user_model == "scripted" and traj.termination == TerminationReason.USER_STOP
        assert traj.metadata["system_prompt_sha1"] and traj.metadata["sampling"]["temperature"] == 1.0
        sampled = [m.sampled for m in traj.messages if m.role == "assistant" and m.sampled]
        assert sampled and sampled[0].completion_ids == [4, 5] and sampled[0].prompt_ids == [1, 2, 3]


def test_resume_runs_only_missing_pairs(toy, store):
    run(toy, ToyPolicy(), store, trials=1)
    policy = ToyPolicy()
    result = run(toy, policy, store, trials=3)
    assert result.resumed == 6 and result.ran == 12
    assert {trial for _, trial, _ in policy.calls} == {1, 2}
    again = ToyPolicy()
    result = run(toy, again, store, trials=3)
    assert result.ran == 0 and again.calls == [] and result.complete
    assert Counter(r["id"] for r in store.records()).most_common(1)[0][1] == 1


def test_infra_failures_recorded_then_retried(toy, store):
    flaky = ToyPolicy(lambda task, trial: "infra" if task == "train-1" else "ok")
    result = run(toy, flaky, store, trials=2)
    assert result.infra == 2 and result.scored == 10 and not result.complete
    bad = store.latest()["toy/train/train-1/0"]
    assert bad["termination"] == "infra_error" and bad["infra_error"].startswith("connection")
    assert bad["reward"] is None and bad["success"] is None

    healed = ToyPolicy()
    result = run(toy, healed, store, trials=2)
    assert result.ran == 2 and result.complete
    assert {task for task, _, _ in healed.calls} == {"train-1"}
    latest = store.latest()
    assert latest["toy/train/train-1/0"]["success"] is True and len(latest) == 12
    assert len(store.records()) == 14  # the two infra records stay in the file; the latest record wins


def test_crash_inside_an_episode_is_an_internal_record(toy, store):
    result = run(toy, ToyPolicy(lambda task, trial: "crash" if task == "train-2" else "ok"), store)
    assert result.ran == 6 and result.infra == 1
    record = store.latest()["toy/train/train-2/0"]
    assert record["infra_error"].startswith("internal: RuntimeError: bug in a tool")
    assert record["errors"][0]["kind"] == "internal"


def test_stop_after_consecutive_infra_failures(toy, store):
    result = run(toy, ToyPolicy(lambda task, trial: "infra"), store, trials=2, concurrency=1, stop_after_infra=3)
    assert result.ran == 3 and result.not_started == 9 and "3 infrastructure failures in a row" in result.stopped
    assert len(store.latest()) == 3


class HalfScripted(ToyDomain):
    def scripted_user(self, task):
        return None if task.id == "train-2" else super().scripted_user(task)


def test_user_error_stops_the_run_and_keeps_finished_episodes(store):
    with pytest.raises(UserError, match="no scripted user for task train-2"):
        run(HalfScripted(4), ToyPolicy(), store, concurrency=1)
    assert sorted(store.latest()) == ["toy/train/train-0/0", "toy/train/train-1/0"]


def test_token_ids_policy(toy, store):
    jobs = plan_jobs("toy", "train", toy.tasks("train")[:1], 1, 300)
    asyncio.run(run_rollout(jobs, factory(toy, ToyPolicy(), token_ids="completion"), store))
    traj = Trajectory.model_validate(store.records()[0])
    sampled = [m.sampled for m in traj.messages if m.sampled is not None]
    assert sampled and all(s.prompt_ids is None and s.completion_ids == [4, 5] for s in sampled)


def test_cancel_mid_run_keeps_finished_episodes_once(toy, store):
    policy = ToyPolicy(delay_s=0.05)
    jobs = plan_jobs("toy", "train", toy.tasks("train"), 4, 300)

    async def main():
        task = asyncio.create_task(run_rollout(jobs, factory(toy, policy), store, concurrency=2))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    written = store.records()
    assert 0 < len(written) < 24
    assert len({r["id"] for r in written}) == len(written)
    rest = ToyPolicy()
    result = run(toy, rest, store, trials=4)
    assert result.resumed == len(written) and result.ran == 24 - len(written)
    assert len(store.latest()) == 24 and len(store.records()) == 24
