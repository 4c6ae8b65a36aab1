"""Training sees the prompt the agent is deployed with: the first prompt of a training episode is exactly what
`domain_agent` sends at rollout/evaluation time (system prompt, worked-example turns, the conversation so far)."""

from __future__ import annotations

import asyncio

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.prompt import agent_examples
from trace_rl.engine.text_driver import domain_agent
from trace_rl.engine.token_driver import initial_messages
from trace_rl.errors import UserError
from trace_rl.models.base import ModelResponse
from trace_rl.training.envs import MixTrainEnv, library_family_env
from trace_rl.training.grouping import SeedTable
from trace_rl.training.rollout_func import seed_rows
from trace_rl.types import Message


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[list[Message], object]] = []

    async def chat(self, messages, tools=None, *, adapter=None, sampling=None) -> ModelResponse:
        self.seen.append((messages, tools))
        return ModelResponse(message=Message(role="assistant", content="ok"))

    async def aclose(self) -> None:
        return None


def test_library_training_prompt_matches_the_deployed_agent():
    env = library_family_env("lookup_answer")
    first = initial_messages(env, 7, EpisodeLimits())
    assert first is not None
    examples = agent_examples(env, env.make_task(7))
    assert len(examples) >= 4 and first[1 : len(examples) + 1] == examples

    client = Recorder()
    agent = domain_agent(env.domain, client)
    conversation = first[len(examples) + 1 :]
    asyncio.run(agent.act(conversation))
    sent, tools = client.seen[0]
    assert sent == first  # same system prompt, same examples, same conversation
    assert not tools and env.agent_tools(env.make_env(env.make_task(7))) is None  # the prompt lists the tools


def test_mixed_environment_uses_each_task_s_own_examples():
    mix = MixTrainEnv("mix", [library_family_env("lookup_answer"), library_family_env("multi_step")])
    for seed in (0, 1):
        task = mix.make_task(seed)
        assert agent_examples(mix, task) == agent_examples(mix.envs[seed % 2], task)


class FlakyTaskEnv:
    """A library family whose seed 3 cannot be generated (as when the leak guard refuses every draw)."""

    def __init__(self) -> None:
        self.inner = library_family_env("lookup_answer")
        self.name = "flaky"

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def make_task(self, seed: int):
        if seed == 3:
            raise UserError("capability env 'flaky': no usable task for seed 3 in 8 draws")
        return self.inner.make_task(seed)


def test_a_seed_whose_task_cannot_be_drawn_is_skipped_not_fatal():
    rows, skipped = seed_rows(FlakyTaskEnv(), [1, 2, 3, 4], EpisodeLimits(), SeedTable())
    assert [r["seed"] for r in rows] == [1, 2, 4] and skipped == [3]
