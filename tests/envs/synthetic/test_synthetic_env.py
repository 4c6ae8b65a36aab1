"""Capability environments over the library: determinism, splits, hints, the Domain protocol, the leak guard, and
the Definition-2 test: the gold solution scores 1, the same solution without the capability's step scores lower."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trace_rl.artifacts.environments import SplitSpec, read_env_spec, write_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import CapabilityEnvironment, is_hinted, load_capability_env, strip_hint
from trace_rl.envs.synthetic.leak_guard import LeakIndex
from trace_rl.models.scripted import ScriptedClient
from trace_rl.synthesize.design import HINTS, primary_check
from trace_rl.synthesize.evidence import Evidence
from trace_rl.synthesize.from_target import target_spec
from trace_rl.synthesize.validate import ablate, final_text
from trace_rl.types import Capability, Task

FAMILIES = {
    "precondition_verification": "precondition_refusal",
    "tool_calling_precision": "authenticated_write",
    "multi_step_completion": "multi_step",
    "structured_data_reasoning": "copy_selection",
}


@pytest.fixture(scope="module")
def library():
    cfg = EnvConfig(name="library", options={"n_train": 20, "n_test": 10})
    return cfg, load_domain("library", cfg)


def build(tmp: Path, library, kind: str) -> CapabilityEnvironment:
    cfg, domain = library
    cap = Capability(name=kind, definition=f"The {kind.replace('_', ' ')} capability, defined precisely.")
    evidence = Evidence(cap, tasks=[t for t in domain.tasks("train") if t.metadata["family"] == FAMILIES[kind]][:2])
    spec, why = target_spec(
        evidence, kind, cfg, domain, SynthesizeConfig(train_seeds=12, test_seeds=6, library_tasks="variants")
    )
    assert spec is not None, why
    folder = tmp / kind
    write_env_spec(EnvLayout(folder), spec)
    return load_capability_env(folder, target=domain)


def test_spec_round_trip_and_disjoint_splits(tmp_path, library):
    env = build(tmp_path, library, "tool_calling_precision")
    again = read_env_spec(EnvLayout(env.folder))
    assert again == env.spec and again.generator.kind == "library_variants"
    assert again.generator.params["families"] == {"authenticated_write": 2}
    with pytest.raises(ValueError, match="overlap"):
        SplitSpec(train=(0, 10), test=(5, 10))


def test_tasks_are_seeded_fresh_and_deterministic(tmp_path, library):
    from trace_rl.envs.library.splits import SplitOptions, split_seeds

    env = build(tmp_path, library, "multi_step_completion")
    a, b = env.make_task(3), load_capability_env(env.folder, target=library[1]).make_task(3)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.id == "multi_step_completion-3" and a.metadata["family"] == "multi_step"
    assert env.make_task(4).model_dump_json() != a.model_dump_json()
    used = {s for split in ("train", "test") for _, s in split_seeds(split, SplitOptions(n_train=20, n_test=10))}
    worlds = {env.make_task(s).metadata["world_seed"] for s in range(8)}
    assert not worlds & used  # never a target train or test world


def test_domain_protocol_and_registry(tmp_path, library):
    env = build(tmp_path, library, "structured_data_reasoning")
    env.folder.joinpath("status.json").write_text('{"status": "ready"}')
    domain = load_domain(f"synthetic:{env.folder}", EnvConfig(name="x", options={"n_train": 5, "n_test": 3}))
    assert domain.splits() == ["train", "test"] and domain.status == "ready"
    train, test = domain.tasks("train"), domain.tasks("test")
    assert len(train) == 5 and len(test) == 3 and not {t.id for t in train} & {t.id for t in test}
    assert domain.task_by_id(train[2].id) == train[2]
    assert domain.scripted_user(train[0]) is not None and domain.make_env().tool_schemas()


def test_hinted_prompt_is_marked_and_strippable(tmp_path, library):
    env = build(tmp_path, library, "precondition_verification")
    plain, hinted = env.system_prompt(), env.system_prompt(hinted=True)
    assert plain == library[1].system_prompt()  # the target's own prompt: fidelity for transfer
    assert is_hinted(hinted) and not is_hinted(plain) and strip_hint(hinted) == plain
    assert env.hint_fraction == SynthesizeConfig().hint_fraction
    tools = [s["function"]["name"] for s in env.tool_schemas()]
    for text in HINTS.values():  # hints are soft guidance: no tool names
        assert not any(t in text for t in tools)


def _gold_client(task: Task, actions, final: str) -> ScriptedClient:
    script = [{"tool_calls": [{"name": a.name, "arguments": a.arguments}]} for a in actions]
    return ScriptedClient([*script, {"content": final}], on_exhausted="repeat_last")


def _episode(env: CapabilityEnvironment, task: Task, client: ScriptedClient) -> tuple[float, bool]:
    target_env = env.make_env()
    agent = Agent(client, env.system_prompt(), target_env.tool_schemas())
    traj = asyncio.run(
        run_episode(
            env=target_env,
            task=task,
            agent=agent,
            user=env.scripted_user(task),
            spec=EpisodeSpec(env=f"synthetic:{env.name}", split="train"),
        )
    )
    return env.reward(task, traj)


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_tasks_need_the_capability(tmp_path, library, kind):
    """Definition 2: full gold run scores 1; the same run with the capability's step removed scores lower."""
    env = build(tmp_path, library, kind)
    for seed in (0, 1):
        task = env.make_task(seed)
        actions = task.evaluation_criteria.actions
        reward, success = _episode(env, task, _gold_client(task, actions, final_text(task)))
        assert reward == pytest.approx(1.0) and success
        ablated = ablate(primary_check(env.spec.reward), env.make_env(), task)
        assert ablated is not None
        lower, _ = _episode(env, task, _gold_client(task, *ablated))
        assert lower < reward, (kind, seed, lower)


def test_shaped_reward_recipe(tmp_path, library):
    from trace_rl.types import TerminationReason

    env = build(tmp_path, library, "multi_step_completion")
    task = env.make_task(0)
    from trace_rl.synthesize.validate import play

    writes = [a for a in task.evaluation_criteria.actions if a.name != "find_member_by_email"]
    msgs, _ = play(env.make_env(), task, task.evaluation_criteria.actions[:1], opening="hi", final="ok")
    score = env.rewarder.score_messages(task, msgs, TerminationReason.USER_STOP)
    c, spec = score.components, env.spec.reward
    weighted = sum(c[k] * w for k, w in spec.weights.items()) / sum(spec.weights.values())
    product = c["capability"] * c["db"] * c["communicate"]
    assert score.reward == pytest.approx(spec.alpha * product + (1 - spec.alpha) * weighted, abs=1e-6)
    assert 0 < score.reward < 1 and not score.success and writes
    cut = env.rewarder.score_messages(task, msgs, TerminationReason.MAX_STEPS)
    assert cut.reward == 0.0 and not cut.success  # τ²'s gate: only stop-terminated episodes score


def test_leak_guard_redraws_a_leaking_task(tmp_path, library):
    env = build(tmp_path, library, "tool_calling_precision")
    first = env.make_task(0)
    member = first.metadata["user_script"]["facts"]
    index = LeakIndex()
    index.add("name", f"{member['first_name']} {member['last_name']}")
    index.finalize().save(env.folder)
    guarded = load_capability_env(env.folder, target=library[1]).make_task(0)
    assert guarded.model_dump_json() != first.model_dump_json()
    assert member["last_name"] not in str(guarded.user_scenario)


def test_train_env_adapter_scores_on_the_live_environment(tmp_path, library):
    from trace_rl.envs.synthetic import load_train_env
    from trace_rl.synthesize.validate import opening_line, play
    from trace_rl.types import TerminationReason, ToolCall

    env = build(tmp_path, library, "tool_calling_precision")
    train_env = load_train_env(env.folder)
    task = train_env.make_task(2)
    assert train_env.has_hint() and strip_hint(train_env.system_prompt(task, hinted=True)) == env.system_prompt()
    live = train_env.make_env(task)
    live.reset(task)
    actions = task.evaluation_criteria.actions
    msgs, _ = play(live, task, actions, opening=opening_line(env, task), final=final_text(task))
    for a in actions:  # `play` ran on a copy: apply the calls to the live environment as the episode would have
        live.execute(ToolCall(id="x", name=a.name, arguments=a.arguments))
    score = asyncio.run(train_env.score(live, task, msgs, TerminationReason.USER_STOP))
    assert score.shaped == pytest.approx(1.0) and score.success and score.breakdown["db"] == 1.0
    assert "check/exact_arguments" in score.breakdown
    fresh = train_env.make_env(task)
    fresh.reset(task)
    miss = asyncio.run(train_env.score(fresh, task, msgs, TerminationReason.USER_STOP))
    assert miss.breakdown["db"] == 0.0 and not miss.success and miss.shaped < 1.0


def test_lowering_the_difficulty_knob_favours_the_easier_evidence_families(tmp_path, library):
    """Calibration's `too_hard` move (knob 1 → 0) shifts a mixed environment toward the families the base can solve;
    `too_easy` (knob 2) shifts it the other way."""
    from trace_rl.envs.synthetic.generators import LibraryVariants

    env = build(tmp_path, library, "structured_data_reasoning")
    mixed = {"lookup_answer": 1, "copy_selection": 4, "multi_step": 2}
    spec = env.spec.model_copy(
        update={"generator": env.spec.generator.model_copy(update={"params": {"families": mixed}})}
    )

    def lookup_share(knob: int) -> float:
        gen = LibraryVariants(
            spec.model_copy(update={"generator": spec.generator.model_copy(update={"difficulty": knob})}), library[1]
        )
        weights = dict(zip(gen.families, gen.weights, strict=True))
        return weights["lookup_answer"] / sum(weights.values())

    assert lookup_share(1) == pytest.approx(1 / 7)  # the default knob keeps the evidence weights
    assert lookup_share(0) > 0.6 > lookup_share(1) > lookup_share(2)
