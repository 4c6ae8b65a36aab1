"""Group-by-seed, outcome-based informativeness, re-sampling, dropping, hint slots, and the rollout output."""

from __future__ import annotations

import pytest
from tests.training.train_toy import BLUE, ScriptedSampler, ToyEnv, alternating

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.token_driver import EpisodeResult, EpisodeRunner
from trace_rl.training.grouping import (
    GroupPlan,
    SeedTable,
    collect_groups,
    hint_slots,
    is_informative,
    resample_seed,
    split_groups,
)
from trace_rl.training.rollout_func import GroupRollout, seed_rows
from trace_rl.types import EpisodeScore


def ep(seed: int, success: bool, shaped: float, hinted: bool = False) -> EpisodeResult:
    return EpisodeResult(
        seed=seed,
        hinted=hinted,
        task_id=f"t{seed}",
        base_prompt_ids=[1, 2],
        completion_ids=[3, 4, 5],
        env_mask=[1, 0, 1],
        logprobs=[0.0] * 3,
        score=EpisodeScore(shaped=shaped, success=success),
    )


def test_outcome_filter_ignores_shaped_noise():
    noisy_failures = [ep(1, False, 0.1), ep(1, False, 0.3), ep(1, False, 0.2), ep(1, False, 0.25)]
    assert is_informative(noisy_failures, "reward")  # a std filter is fooled by the shaped-reward noise
    assert not is_informative(noisy_failures, "outcome")
    assert not is_informative(noisy_failures, "both")
    mixed = [ep(1, True, 1.0), ep(1, False, 0.3)]
    assert is_informative(mixed, "outcome") and is_informative(mixed, "both")
    assert is_informative(noisy_failures, "none")


def test_resampling_replaces_uninformative_groups_and_drops_the_rest():
    # seed 10 is informative; seed 20 never succeeds (noisy shaped reward); seed 30 is uninformative, but its first
    # re-sample succeeds half the time
    informative_seeds = {10, resample_seed(900, 0, 2, 1)}
    calls = []

    def fake_run(requests):
        calls.append([r.seed for r in requests])
        out = []
        for i, r in enumerate(requests):
            good = r.seed in informative_seeds
            out.append(ep(r.seed, good and i % 2 == 0, 0.1 * (i % 3) + (0.9 if good and i % 2 == 0 else 0)))
        return out

    plan = GroupPlan(
        k=4, filter_on="outcome", resample_attempts=2, min_informative_fraction=1.0, resample_seed_start=900
    )
    groups = collect_groups([10, 20, 30], plan, fake_run, step=0)
    assert [g.informative for g in groups] == [True, False, True]
    assert groups[0].attempts == 0 and groups[0].seeds_tried == [10]
    assert groups[1].attempts == 2 and len(groups[1].seeds_tried) == 3 and groups[1].dropped
    assert groups[2].attempts == 1 and groups[2].seed == resample_seed(900, 0, 2, 1)
    assert len(calls) == 3 and len(calls[0]) == 12 and len(calls[1]) == 8 and len(calls[2]) == 4  # batched rounds
    # re-sampling stops once enough groups are informative (released code: half)
    calls.clear()
    half = GroupPlan(k=4, resample_attempts=3, min_informative_fraction=0.3, resample_seed_start=900)
    collect_groups([10, 20, 30], half, fake_run)
    assert len(calls) == 1


def test_hint_slots_and_seed_table_and_group_split():
    assert hint_slots(4, 0.25) == [False, False, False, True]
    assert hint_slots(4, 0.0) == [False] * 4 and hint_slots(2, 1.0) == [True, True]
    table = SeedTable()
    p1 = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]
    assert table.add(p1, 7) and not table.add([dict(m) for m in p1], 8)  # a colliding prompt keeps the first seed
    assert table.seed_of(p1) == 7
    p2 = [{"role": "user", "content": "b"}]
    assert split_groups([p1, p1, p2, p2], 2) == [p1, p2]
    with pytest.raises(RuntimeError, match="contract"):
        split_groups([p1, p2, p1, p2], 2)  # TRL stopped repeating prompts consecutively
    with pytest.raises(RuntimeError, match="contract"):
        split_groups([p1, p1, p1], 2)


def test_rollout_output_drops_constant_groups_and_strips_hints(codec, tokenizer):
    env = ToyEnv(hint="prefer red", noise=0.5)
    limits = EpisodeLimits(max_turn_tokens=64, max_episode_tokens=512)
    table = SeedTable()
    rows, skipped = seed_rows(env, [1, 2], limits, table)
    assert [r["seed"] for r in rows] == [1, 2] and not skipped
    sampler = ScriptedSampler(tokenizer, alternating(tokenizer))
    runner = EpisodeRunner(env, codec, limits)
    # group of seed 2 always picks blue: its shaped reward varies (noise) but the outcome never does
    alternate = alternating(tokenizer)

    def choose(ctx, call):
        if "picked" not in tokenizer.decode(ctx[-40:]) and "Request 2" in tokenizer.decode(ctx):
            return BLUE
        return alternate(ctx, call)

    sampler.choose = choose
    plan = GroupPlan(k=4, filter_on="outcome", resample_attempts=0, hint_fraction=0.5)
    rollout = GroupRollout(env, runner, plan, table, lambda trainer: sampler)
    prompts = [rows[0]["prompt"]] * 4 + [rows[1]["prompt"]] * 4
    out = rollout(prompts, trainer=None)
    assert all(len(v) == 8 for v in out.values())
    assert out["env_reward"][4:] == [None] * 4 and all(sum(m) == 0 for m in out["env_mask"][4:])
    assert all(r is not None for r in out["env_reward"][:4]) and all(sum(m) > 0 for m in out["env_mask"][:4])
    assert out["hinted"] == [False, False, True, True] * 2 and out["seed"] == [1] * 4 + [2] * 4
    for ids in out["prompt_ids"]:
        assert "prefer red" not in tokenizer.decode(ids)
    assert any("prefer red" in tokenizer.decode(c) for c in sampler.contexts)  # hinted rollouts did see the hint
    stats = rollout.take_stats()
    assert stats["groups/frac_dropped"] == 0.5 and stats["env/hinted_fraction"] == 0.5
