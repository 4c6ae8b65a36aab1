"""TRACE's stages on ToolSandbox: reference paths as the tasks' gold actions (reference-guided diagnosis), the
`toolsandbox_scenarios` generator (train-split evidence families, augmentations by difficulty knob), capability
environments scored by ToolSandbox's own similarity (validation by reference path and do-nothing ablation,
calibration, the training scorer), all through the real commands on a do-nothing scripted agent."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.envs.toolsandbox.helpers import needs_data

from trace_rl.cli.app import main as cli
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import load_capability_env, load_train_env
from trace_rl.envs.synthetic.toolsandbox_scenarios import variants_for
from trace_rl.envs.toolsandbox.domain import family_split
from trace_rl.envs.toolsandbox.reference import replay_reference
from trace_rl.types import TerminationReason

pytestmark = needs_data
SORRY = "I am sorry, but I cannot assist with that."


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    root = tmp_path_factory.mktemp("ts")
    model = root / "sorry.yaml"
    model.write_text("kind: scripted\nscript:\n" + f"  - {SORRY}\n" * 120)
    run = root / "run"
    common = ["--run", str(run)]
    rollout = ["rollout", "--env", "toolsandbox:base_offline", "--split", "train", "--model", str(model)]
    assert cli([*rollout, *common, "--progress", "none"]) == 0
    assert cli(["diagnose", *common, "--analyst", "structural"]) == 0
    synth = ["synthesize", *common, "--generator", "target", "--policy", str(model), "--groups", "2", "--samples", "2"]
    assert cli([*synth, "--max-attempts", "1"]) == 0
    folders = sorted((run / "envs").iterdir())
    assert folders, "diagnosis selected no capability"
    return run, folders[0]


def test_reference_paths_are_the_gold_actions() -> None:
    domain = load_domain("toolsandbox:base_offline")
    tasks = domain.tasks("all")
    for task in tasks[:20]:
        replay, _ = replay_reference(domain, task)
        calls = [(s["name"], s["arguments"]) for s in replay.steps if s["type"] == "tool_call"]
        assert [(a.name, a.arguments) for a in task.evaluation_criteria.actions] == calls
    assert any(not t.evaluation_criteria.actions for t in tasks)  # insufficient information: act by not acting
    free = [a for t in tasks for a in t.evaluation_criteria.actions if "content" in a.arguments]
    assert free and all("content" not in (a.compare_args or []) for a in free)  # ROUGE-L scored, not exact


def test_spec_draws_train_families_and_is_scored_by_similarity(synthesized) -> None:
    _, folder = synthesized
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["generator"]["kind"] == "toolsandbox_scenarios"
    assert spec["reward"]["source"] == "target"
    families = spec["generator"]["params"]["families"]
    assert families and all(family_split(f) == "train" for f in families)
    assert spec["generator"]["params"]["evidence_categories"]  # ToolSandbox's categories of the evidence
    validation = json.loads((folder / "validation.json").read_text())["attempts"][0]
    assert validation["ok"] and validation["capability_sensitivity"] == 1.0
    assert all(t["gold_reward"] == 1.0 and t["ablated_reward"] < 1.0 for t in validation["tasks"])
    env = load_capability_env(folder)
    tasks = [env.make_task(s) for s in range(12)]
    assert all(t.metadata["family"] in families for t in tasks)
    assert all(t.metadata["split"] == "train" for t in tasks)
    calib = [json.loads(line) for line in (folder / "calibration" / "trajectories.jsonl").read_text().splitlines()]
    assert calib and all("similarity" in c["reward_info"]["breakdown"] for c in calib)


def test_knob_widens_the_pool_with_augmentations(synthesized) -> None:
    _, folder = synthesized
    env = load_capability_env(folder)
    pools = {}
    for knob in (0, 1, 2, 4):
        env.spec = env.spec.model_copy(update={"generator": env.spec.generator.model_copy(update={"difficulty": knob})})
        env.__dict__.pop("generator", None)
        pools[knob] = env.generator.pool
        variants = {env.target.scenarios[n]["variant"] for n in pools[knob]}
        allowed = variants_for(knob)
        assert allowed == "*" or variants <= set(allowed)
    assert len(pools[0]) < len(pools[1]) < len(pools[2]) < len(pools[4])
    assert set(pools[0]) <= set(pools[4])


def test_training_scorer_is_toolsandbox_similarity(synthesized) -> None:
    _, folder = synthesized
    train_env = load_train_env(folder)
    task = train_env.make_task(3)
    env = train_env.make_env(task)
    env.reset(task)
    replay, scores = replay_reference(train_env.env.target, task)
    good = asyncio.run(train_env.score(env, task, replay.messages, TerminationReason.USER_STOP))
    assert good.success and good.shaped == pytest.approx(scores["similarity"]) == 1.0
    opening_only = replay.messages[:1]  # the user's request, and the agent does nothing
    bad = asyncio.run(train_env.score(env, task, opening_only, TerminationReason.USER_STOP))
    assert not bad.success and bad.shaped < 1.0
    assert train_env.agent_tools(env) == train_env.env.target.tool_schemas_for(task)  # the scenario's own schemas
