"""Task generation and splits: determinism, metadata, disjoint seeds, gold replay on every task."""

from __future__ import annotations

import pytest

from trace_rl.config import EnvConfig
from trace_rl.envs.check import check_domain
from trace_rl.envs.evaluator import gold_environment
from trace_rl.envs.library import CAPABILITY_TYPES, FAMILIES, LibraryDomain, fresh_train_seeds, make_task
from trace_rl.envs.library.splits import SplitOptions, held_out_seed_range, split_seeds
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError

PAPER_TYPES = {
    "structured_data_reasoning",
    "tool_calling_precision",
    "multi_step_completion",
    "precondition_verification",
}


def test_same_seed_same_task_byte_for_byte():
    for family in FAMILIES:
        assert make_task(family, 42).model_dump_json() == make_task(family, 42).model_dump_json()
        assert make_task(family, 42).model_dump_json() != make_task(family, 43).model_dump_json()


def test_families_cover_the_paper_capability_types():
    assert set(FAMILIES) == {
        "lookup_answer",
        "authenticated_write",
        "precondition_refusal",
        "multi_step",
        "copy_selection",
    }
    assert set(CAPABILITY_TYPES.values()) == PAPER_TYPES


def test_metadata_and_shape(domain: LibraryDomain):
    difficulties = set()
    for task in domain.tasks("test"):
        meta = task.metadata
        assert {"family", "difficulty", "capability_type", "seed", "world_seed", "variant", "user_script"} <= set(meta)
        assert task.id == f"{meta['family']}-{meta['seed']}"
        assert meta["capability_type"] == CAPABILITY_TYPES[meta["family"]]
        assert task.evaluation_criteria is not None and task.evaluation_criteria.actions
        assert [b.value for b in task.evaluation_criteria.reward_basis or []] == ["DB", "COMMUNICATE"]
        difficulties.add(meta["difficulty"])
    assert difficulties == {"trivial", "easy", "medium", "hard"}


def test_default_split_sizes_and_disjoint_seeds(domain: LibraryDomain):
    train, test = domain.tasks("train"), domain.tasks("test")
    assert (len(train), len(test)) == (200, 100)
    train_seeds = {t.metadata["seed"] for t in train}
    test_seeds = {t.metadata["seed"] for t in test}
    assert not train_seeds & test_seeds
    assert not {t.metadata["world_seed"] for t in train} & {t.metadata["world_seed"] for t in test}
    assert len(train_seeds) == 200 and len(test_seeds) == 100
    assert all(s in held_out_seed_range(SplitOptions()) for s in test_seeds)
    fresh = fresh_train_seeds(50)
    assert not set(fresh) & (train_seeds | test_seeds) and not set(fresh) & set(held_out_seed_range(SplitOptions()))
    for family in FAMILIES:  # round robin: every family in both splits
        assert sum(t.metadata["family"] == family for t in test) == 20


def test_sizes_and_family_mix_are_configurable():
    d = load_domain("library", EnvConfig(options={"n_train": 6, "n_test": 3, "families": ["copy_selection"]}))
    assert len(d.tasks("train")) == 6 and len(d.tasks("test")) == 3
    assert {t.metadata["family"] for t in d.tasks("train")} == {"copy_selection"}
    shifted = split_seeds("test", SplitOptions(seed=1, n_test=2))
    assert shifted[0][1] != split_seeds("test", SplitOptions(n_test=2))[0][1]
    with pytest.raises(UserError, match="unknown families"):
        load_domain("library", EnvConfig(options={"families": ["nope"]}))
    with pytest.raises(
        UserError,
        match=r"unknown prompt 'v9' \(known: library-agent-v2, library-agent-v3, library-agent-v4, library-agent-v5\)",
    ):
        load_domain("library", EnvConfig(options={"prompt": "v9"}))
    with pytest.raises(UserError, match="n_trian: Extra inputs"):
        load_domain("library", EnvConfig(options={"n_trian": 3}))
    with pytest.raises(UserError, match="unknown library task family"):
        make_task("nope", 1)


def test_gold_replay_matches_on_every_task_of_both_splits(domain: LibraryDomain):
    result = check_domain(domain, ["train", "test"])
    assert result.line == "gold-replay: 300/300 db-match"
    assert not result.gold_errors, result.gold_errors  # no gold action errors either


def test_gold_writes_change_the_db_and_read_only_tasks_do_not(domain: LibraryDomain):
    for task in domain.tasks("test"):
        env = domain.make_env()
        env.reset(task)
        start = env.tools.db.get_hash()
        gold, errors = gold_environment(env, task)
        assert not errors
        changed = gold.tools.db.get_hash() != start
        writes = task.metadata["family"] in ("authenticated_write", "multi_step", "copy_selection")
        assert changed == writes, task.id


def test_communicate_info_is_in_the_gold_tool_results(domain: LibraryDomain):
    """Everything the agent must say can be read off the tool results of the gold path."""
    from trace_rl.types import ToolCall

    for task in domain.tasks("test"):
        env = domain.make_env()
        env.reset(task)
        seen = ""
        for i, action in enumerate(task.evaluation_criteria.actions):
            seen += env.execute(ToolCall(id=str(i), name=action.name, arguments=action.arguments)).content or ""
        for info in task.evaluation_criteria.communicate_info:
            assert info in seen, (task.id, info)


def test_domain_and_environment_protocols(domain: LibraryDomain):
    from trace_rl.envs.base import Domain, Environment

    assert isinstance(domain, Domain) and domain.name == "library" and domain.splits() == ["train", "test"]
    env = domain.make_env()
    assert isinstance(env, Environment)
    task = domain.tasks("train")[0]
    env.reset(task)
    assert env.tools.db.get_hash() == gold_environment(env, task)[0].tools.db.get_hash() or task.metadata["family"] in (
        "authenticated_write",
        "multi_step",
        "copy_selection",
    )
    assert "Reference-only copies never leave the library." in env.policy()
    with pytest.raises(UserError, match="no split"):
        domain.tasks("dev")


def test_a_second_test_range_is_disjoint_and_keeps_the_train_split():
    first = SplitOptions(n_train=5, n_test=10)
    second = SplitOptions(n_train=5, n_test=10, test_start=10)
    assert split_seeds("train", first) == split_seeds("train", second)
    seeds = [s for _, s in split_seeds("test", first)], [s for _, s in split_seeds("test", second)]
    assert not set(seeds[0]) & set(seeds[1]) and seeds[1][0] == seeds[0][0] + 10
    assert all(s in held_out_seed_range(second) for s in seeds[1])
    with pytest.raises(UserError, match="test_start \\+ n_test = 1000005 leaves the test range"):
        load_domain("library", EnvConfig(options={"n_test": 10, "test_start": 999_995}))
