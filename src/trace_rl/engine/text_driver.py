"""The text driver of the episode state machine (`episode.py`): the agent is a `ModelClient` that answers messages with
a message. Rollout, calibration and evaluation run their episodes with `run_episode`; the result is a scored
`Trajectory` (token counts and hop timings included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trace_rl.engine.episode import Episode, EpisodeLimits, Speaker
from trace_rl.engine.prompt import AgentPrompt, agent_prompt, domain_prompt
from trace_rl.envs.base import Environment
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.users import UserSimulator
from trace_rl.errors import InfraError
from trace_rl.models.base import ModelClient, ModelResponse, SamplingParams
from trace_rl.types import Message, Task, Trajectory


class Agent:
    """A tool-using chat agent: its prompt (system prompt, worked-example turns, tools) over any model client,
    optionally on a named adapter. The examples go between the system prompt and the conversation on every call;
    they are part of the prompt, not of the trajectory."""

    def __init__(
        self,
        client: ModelClient,
        system_prompt: str,
        tools: list[dict[str, Any]],
        *,
        sampling: SamplingParams | None = None,
        adapter: str | None = None,
        examples: list[Message] | None = None,
    ) -> None:
        self.client = client
        self.prompt: AgentPrompt = agent_prompt(system_prompt, examples=examples, tools=tools)
        self.sampling = sampling or SamplingParams()
        self.adapter = adapter

    async def act(self, history: list[Message], *, seed: int | None = None) -> ModelResponse:
        sampling = self.sampling if seed is None else self.sampling.model_copy(update={"seed": seed})
        messages = self.prompt.messages(history)
        return await self.client.chat(messages, self.prompt.tools or None, adapter=self.adapter, sampling=sampling)


def domain_agent(
    domain: Any,
    client: ModelClient,
    *,
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    sampling: SamplingParams | None = None,
    adapter: str | None = None,
) -> Agent:
    """The agent as its domain defines it (`prompt.domain_prompt`). Every stage builds agents this way, so rollout,
    calibration and evaluation all see the same prompt format."""
    prompt = domain_prompt(domain, system_prompt=system_prompt, tools=tools)
    return Agent(client, prompt.system, prompt.tools, sampling=sampling, adapter=adapter, examples=prompt.examples)


@dataclass
class EpisodeSpec:
    """Who ran which task: the identity fields of the resulting trajectory."""

    env: str
    split: str
    trial: int = 0
    seed: int = 0
    model: str = ""
    adapter: str | None = None
    capability: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    trajectory_id: str | None = None


async def run_episode(
    *,
    env: Environment,
    task: Task,
    agent: Agent,
    user: UserSimulator,
    spec: EpisodeSpec,
    limits: EpisodeLimits | None = None,
    judge: ModelClient | None = None,
) -> Trajectory:
    """One episode of `task`, scored (with `judge` where the environment's evaluator needs one)."""
    traj = Trajectory(
        id=spec.trajectory_id or f"{spec.env}/{spec.split}/{task.id}/{spec.trial}",
        env=spec.env,
        split=spec.split,
        task_id=task.id,
        trial=spec.trial,
        seed=spec.seed,
        model=spec.model,
        adapter=spec.adapter,
        capability=spec.capability,
        user_model=getattr(user, "name", None),
        metadata=dict(spec.metadata),
    )
    episode = Episode(env=env, task=task, seed=spec.seed, user=user, limits=limits or EpisodeLimits())
    timings = traj.timings
    timings.started_at = episode.started_at
    while True:
        await episode.advance()
        if episode.done or not episode.admit(Speaker.AGENT):
            break
        t0 = time.perf_counter()
        try:
            response = await agent.act(episode.agent_view(), seed=spec.seed * 1000 + episode.steps)
        except InfraError as exc:
            episode.fail(exc)
            break
        finally:
            timings.model_s += time.perf_counter() - t0
        traj.tokens.prompt += response.prompt_tokens
        traj.tokens.completion += response.completion_tokens
        traj.tokens.model_calls += 1
        episode.add_agent_message(response.message)

    info = await episode.score(lambda: env.score(task, episode.messages, episode.termination, judge))
    if info is not None:
        traj.reward_info = info
        traj.reward = info.reward
        traj.success = is_success(info.reward)
    traj.messages = episode.messages
    traj.termination = episode.termination
    traj.errors = episode.errors
    traj.infra_error = episode.infra_error
    timings.user_s += episode.user_s
    timings.env_s += episode.env_s
    timings.ended_at = time.time()
    return traj
