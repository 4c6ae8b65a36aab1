"""The toolsandbox domain through trace-rl's engine: task sets, family splits, per-scenario schemas, the
do-nothing floor (16/91 perfect offline, mean 0.1876 as measured with ToolSandbox's UnhelpfulAgent), and an
episode whose tool calls and text turns are scored in position."""

from __future__ import annotations

import asyncio

import pytest

from trace_rl.config import EnvConfig
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.testing.playback import PlaybackClient, call, say

from .helpers import needs_data

pytestmark = needs_data
SORRY = "I am sorry, but I cannot assist with that."


def _episode(domain, task, agent_messages):
    env = domain.make_env()
    env.reset(task)
    agent = Agent(PlaybackClient(agent_messages), domain.system_prompt(), env.tool_schemas())
    spec = EpisodeSpec(env=domain.name, split="all")
    return run_episode(env=domain.make_env(), task=task, agent=agent, user=domain.scripted_user(task), spec=spec)


@pytest.mark.parametrize(
    ("task_set", "count"), [("base_offline", 91), ("base", 129), ("all_offline", 728), ("all", 1032)]
)
def test_task_sets_and_family_splits(task_set: str, count: int) -> None:
    domain = load_domain(f"toolsandbox:{task_set}")
    tasks = domain.tasks("all")
    assert len(tasks) == count
    train, test = domain.tasks("train"), domain.tasks("test")
    assert len(train) + len(test) == count and test
    assert not {t.metadata["family"] for t in train} & {t.metadata["family"] for t in test}
    assert all(not t.metadata["needs_network"] for t in tasks) == task_set.endswith("offline")


def test_unknown_task_set_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown task set"):
        load_domain("toolsandbox:everything", EnvConfig(name="toolsandbox:everything"))


def test_do_nothing_floor_is_16_of_91() -> None:
    domain = load_domain("toolsandbox:base_offline")

    async def run_all():
        return [await _episode(domain, t, [say(SORRY)]) for t in domain.tasks("all")]

    trajectories = asyncio.run(run_all())
    rewards = [t.reward for t in trajectories]
    assert sum(r == 1.0 for r in rewards) == 16
    assert sum(rewards) / len(rewards) == pytest.approx(0.1876, abs=5e-5)


def test_schemas_follow_the_scenario_and_scrambled_names_execute() -> None:
    domain = load_domain("toolsandbox:all_offline")
    task = next(t for t in domain.tasks("all") if t.metadata["variant"].endswith("tool_name_scrambled"))
    env = domain.make_env()
    env.reset(task)
    names = {s["function"]["name"] for s in env.tool_schemas()}
    scenario = domain.scenario(task)
    assert names == set(scenario["agent_facing_tool_names"])
    scrambled, real = next(iter(scenario["agent_to_execution_tool_name"].items()))
    assert scrambled in names and real not in names
    unknown = env.execute(call(real, call_id="x").tool_calls[0])
    assert unknown.error and "not a known allowed tool" in unknown.content


def test_add_contact_episode_scores_one_and_text_turns_count_in_position() -> None:
    domain = load_domain("toolsandbox:base_offline")
    task = next(t for t in domain.tasks("all") if t.id == "add_contact_with_name_and_phone_number")
    add = call("add_contact", name="Stephen Sondheim", phone_number="+19876543210")
    done = say("Stephen Sondheim has been added to your contact")
    good = asyncio.run(_episode(domain, task, [add, done]))
    assert good.reward == 1.0
    assert good.messages[2].content == "'e3e70682-c209-4cac-a29f-6fbed82c07cd'"
    # a text turn first: the scripted user ends there, so the addition milestone is never reached and the message
    # milestone is matched against the early text only
    early = asyncio.run(_episode(domain, task, [say("I will add Stephen Sondheim to your contact"), add, done]))
    assert 0.0 < early.reward < 1.0
    assert early.reward_info.details["milestone_mapping"]["0"][1] == 0.0
    wrong = asyncio.run(
        _episode(domain, task, [call("add_contact", name="Stephen", phone_number="+19876543210"), done])
    )
    assert 0.0 < wrong.reward < 1.0


def test_the_rollout_engine_renders_each_scenarios_own_tools() -> None:
    """`EpisodeFactory` asks a domain with `tool_schemas_for(task)` per episode (schemas differ per scenario)."""
    from trace_rl.engine.plan import Job
    from trace_rl.engine.runner import EpisodeFactory
    from trace_rl.models.base import ModelResponse
    from trace_rl.types import Message

    seen: list[set[str]] = []

    class Recorder:
        name = "recorder"

        async def chat(self, messages, tools=None, *, adapter=None, sampling=None):
            seen.append({t["function"]["name"] for t in tools or []})
            return ModelResponse(message=Message(role="assistant", content=SORRY))

        async def aclose(self) -> None:
            return None

    domain = load_domain("toolsandbox:all_offline")
    scrambled = next(t for t in domain.tasks("all") if t.metadata["variant"].endswith("tool_name_scrambled"))
    plain = next(t for t in domain.tasks("all") if t.metadata["family"] != scrambled.metadata["family"])
    factory = EpisodeFactory(domain, "toolsandbox:all_offline", "all", Recorder(), "recorder")
    for i, task in enumerate((scrambled, plain)):
        asyncio.run(factory.run(Job(task=task, trial=0, seed=i, id=f"j{i}")))
    expected = [set(domain.scenario(t)["agent_facing_tool_names"]) for t in (scrambled, plain)]
    assert seen[0] == expected[0] and seen[-1] == expected[1] and expected[0] != expected[1]


def test_worked_example_is_an_option_off_by_default_and_from_a_train_family() -> None:
    from trace_rl.engine.prompt import domain_prompt
    from trace_rl.envs.toolsandbox.domain import family_split

    assert load_domain("toolsandbox:base_offline").example_messages() == []
    cfg = EnvConfig(name="toolsandbox:base_offline", options={"worked_example": True})
    domain = load_domain("toolsandbox:base_offline", cfg)
    example = domain.example_messages()
    assert [m.role for m in example] == ["user", "assistant", "tool", "assistant"]
    assert all(m.example for m in example) and example[1].tool_calls[0].name == "add_contact"
    assert not example[2].error  # the call succeeded in the example's own world
    scenario = domain.scenarios["add_contact_with_name_and_phone_number"]
    assert family_split(scenario["base_scenario"]) == "train"
    prompt = domain_prompt(domain, tools=[])
    assert prompt.examples == example  # the agent's prompt carries it, as the library's worked example
    with pytest.raises(UserError, match="worked_example"):
        load_domain("toolsandbox:base_offline", EnvConfig(name="toolsandbox:base_offline", options={"x": 1}))
    with pytest.raises(UserError, match="true or false"):
        opts = {"worked_example": "yes"}
        load_domain("toolsandbox:base_offline", EnvConfig(name="toolsandbox:base_offline", options=opts))
