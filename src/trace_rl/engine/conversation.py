"""The half-duplex episode loop of τ²-bench (tau2-domains.md §2.3): agent, user simulator and environment.

Each step moves one hop (agent→user, agent→env, env→agent, user→agent, user→env→user). The agent opens with a fixed
greeting unless the task replays a message history. The episode ends on a user stop token (USER_STOP), max_steps
(TRACE used 50), max_errors tool errors (10), a wall-clock timeout, or an empty agent turn (AGENT_ERROR). Any
termination but agent/user stop scores 0. Infrastructure failures (`InfraError`) end the episode as INFRA_ERROR and are
not scored: the rollout engine retries them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.base import Environment
from trace_rl.envs.evaluator import is_success
from trace_rl.envs.users import UserSimulator, is_stop
from trace_rl.errors import InfraError
from trace_rl.models.base import ModelClient, ModelResponse, SamplingParams
from trace_rl.types import ErrorRecord, Message, Task, TerminationReason, Trajectory

GREETING = "Hi! How can I help you today?"
CONTEXT_OVERFLOW_KIND = "context_length"  # InfraError kind for a prompt longer than the model's context


class Agent:
    """A tool-using chat agent: system prompt + tools over any model client, optionally on a named adapter.

    `examples` (few-shot turns, e.g. a domain's worked example) go between the system prompt and the conversation on
    every call; they are part of the prompt, not of the trajectory.
    """

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
        self.system_prompt = system_prompt
        self.tools = tools
        self.sampling = sampling or SamplingParams()
        self.adapter = adapter
        self.examples = [m.model_copy(update={"example": True}) for m in examples or []]

    async def act(self, history: list[Message], *, seed: int | None = None) -> ModelResponse:
        messages = [Message(role="system", content=self.system_prompt), *self.examples, *history]
        sampling = self.sampling if seed is None else self.sampling.model_copy(update={"seed": seed})
        return await self.client.chat(messages, self.tools or None, adapter=self.adapter, sampling=sampling)


def domain_agent(
    domain: Any,
    client: ModelClient,
    *,
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    sampling: SamplingParams | None = None,
    adapter: str | None = None,
) -> Agent:
    """The agent as its domain defines it: the system prompt, the domain's worked-example turns (if it has any), and
    tool schemas unless the prompt already lists the tools (`prompt_lists_tools`). Every stage builds agents this way,
    so rollout, calibration and evaluation all see the same prompt format."""
    examples = getattr(domain, "example_messages", None)
    return Agent(
        client,
        system_prompt if system_prompt is not None else domain.system_prompt(),
        [] if getattr(domain, "prompt_lists_tools", False) else (tools or []),
        sampling=sampling,
        adapter=adapter,
        examples=examples() if callable(examples) else None,
    )


@dataclass
class EpisodeLimits:
    max_steps: int = 50
    max_errors: int = 10
    timeout_s: float | None = None


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


def agent_view(messages: list[Message], user_call_ids: set[str]) -> list[Message]:
    """What the agent sees: no user tool calls and no results of them (dual-control domains)."""
    return [
        m
        for m in messages
        if not (m.role == "user" and m.tool_calls) and not (m.role == "tool" and m.tool_call_id in user_call_ids)
    ]


def user_view(messages: list[Message], user_call_ids: set[str]) -> list[Message]:
    """What the user sees: its own turns, the agent's text, and results of its own tool calls."""
    return [
        m
        for m in messages
        if m.role == "user"
        or (m.role == "assistant" and m.content)
        or (m.role == "tool" and m.tool_call_id in user_call_ids)
    ]


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
    limits = limits or EpisodeLimits()
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
    timings = traj.timings
    timings.started_at = time.time()
    messages: list[Message] = env.reset(task, spec.seed)
    if not messages:
        messages.append(Message(role="assistant", content=GREETING, turn=0))
    user_call_ids: set[str] = set()
    n_errors = 0
    steps = 0
    termination: TerminationReason | None = None

    def next_speaker() -> str:
        last = messages[-1]
        if last.role == "tool":
            return "user" if last.tool_call_id in user_call_ids else "agent"
        if last.role == "assistant":
            return "env" if last.tool_calls else "user"
        return "env" if last.tool_calls else "agent"  # user message

    try:
        while termination is None:
            if steps >= limits.max_steps:
                termination = TerminationReason.MAX_STEPS
                break
            if limits.timeout_s is not None and time.time() - timings.started_at > limits.timeout_s:
                termination = TerminationReason.TIMEOUT
                break
            steps += 1
            speaker = next_speaker()
            if speaker == "user":
                t0 = time.perf_counter()
                reply = await user.reply(user_view(messages, user_call_ids))
                timings.user_s += time.perf_counter() - t0
                messages.append(reply.model_copy(update={"turn": steps}))
                if reply.tool_calls:
                    user_call_ids.update(c.id for c in reply.tool_calls)
                elif is_stop(reply.content):
                    termination = TerminationReason.USER_STOP
                elif not reply.content:
                    traj.errors.append(ErrorRecord(kind="user", message="empty user message", turn=steps))
                    termination = TerminationReason.USER_ERROR
            elif speaker == "agent":
                t0 = time.perf_counter()
                response = await agent.act(agent_view(messages, user_call_ids), seed=spec.seed * 1000 + steps)
                timings.model_s += time.perf_counter() - t0
                traj.tokens.prompt += response.prompt_tokens
                traj.tokens.completion += response.completion_tokens
                traj.tokens.model_calls += 1
                message = response.message.model_copy(update={"turn": steps})
                messages.append(message)
                for call in message.tool_calls or []:
                    if call.parse_error:
                        traj.errors.append(
                            ErrorRecord(kind="parse", message=f"{call.name}: {call.parse_error}", turn=steps)
                        )
                if not message.tool_calls and not message.content:
                    traj.errors.append(ErrorRecord(kind="protocol", message="empty agent message", turn=steps))
                    termination = TerminationReason.AGENT_ERROR
            else:  # env executes the pending tool calls of the last message (one hop, like τ²'s MultiToolMessage)
                t0 = time.perf_counter()
                for call in messages[-1].tool_calls or []:
                    result = env.execute(call).model_copy(update={"turn": steps})
                    messages.append(result)
                    if result.error:
                        n_errors += 1
                        traj.errors.append(
                            ErrorRecord(kind="tool", message=f"{call.name}: {result.content}", turn=steps)
                        )
                timings.env_s += time.perf_counter() - t0
                if n_errors >= limits.max_errors:
                    termination = TerminationReason.TOO_MANY_ERRORS
    except InfraError as exc:
        if exc.kind == CONTEXT_OVERFLOW_KIND:  # deterministic: the conversation outgrew the model, an agent failure
            termination = TerminationReason.AGENT_ERROR
            traj.errors.append(ErrorRecord(kind="protocol", message=str(exc), turn=steps))
        else:
            termination = TerminationReason.INFRA_ERROR
            traj.infra_error = str(exc)
            traj.errors.append(ErrorRecord(kind="infra", message=str(exc), turn=steps))

    traj.messages = messages
    traj.termination = termination
    if termination != TerminationReason.INFRA_ERROR:
        try:
            t0 = time.perf_counter()
            info = await env.score(task, messages, termination, judge)
            timings.env_s += time.perf_counter() - t0
            traj.reward_info = info
            traj.reward = info.reward
            traj.success = is_success(info.reward)
        except InfraError as exc:  # the judge failed: infrastructure, not the agent
            traj.infra_error = f"judge {exc}"
            traj.errors.append(ErrorRecord(kind="infra", message=traj.infra_error))
    timings.ended_at = time.time()
    return traj
