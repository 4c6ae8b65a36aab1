"""Test support: deterministic agents and users for τ² smoke tests, conformance vectors and the engine benchmark (no
model calls).

`PlaybackClient` is a `ModelClient` that replays assistant messages; `PlaybackUser` replays user messages (text or
user-tool calls) and then stops; `gold_messages(task)` turns a task's gold actions into one-call assistant turns;
`run_scripted(...)` runs one episode through the conversation engine and the domain's evaluator.
"""

from __future__ import annotations

import asyncio
from typing import Any

from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.base import Environment
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Message, Task, ToolCall, Trajectory

FALLBACK_REPLY = "Is there anything else I can help you with?"


def call(name: str, /, *, call_id: str | None = None, requestor: str = "assistant", **arguments: Any) -> Message:
    """A one-call message: an assistant turn by default, a user-tool turn with requestor='user'."""
    role = "user" if requestor == "user" else "assistant"
    tool_call = ToolCall(id=call_id or f"call_{name}", name=name, arguments=arguments, requestor=role)  # type: ignore[arg-type]
    return Message(role=role, tool_calls=[tool_call])


def say(text: str, role: str = "assistant") -> Message:
    return Message(role=role, content=text)  # type: ignore[arg-type]


def gold_messages(task: Task, *, final_text: str | None = None) -> list[Message]:
    """The task's assistant gold actions, one call per turn, then a closing message (communicate_info included)."""
    criteria = task.evaluation_criteria
    messages = [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id=f"gold_{i}", name=a.name, arguments=dict(a.arguments), requestor="assistant")],
        )
        for i, a in enumerate((criteria.actions if criteria else None) or [])
        if a.requestor == "assistant"
    ]
    info = (criteria.communicate_info if criteria else None) or []
    text = final_text if final_text is not None else " ".join(["Your request has been handled.", *info])
    messages.append(Message(role="assistant", content=text))
    return messages


class PlaybackClient:
    """A model client that answers with the given assistant messages in order, then a fixed polite reply."""

    name = "playback"

    def __init__(self, messages: list[Message]) -> None:
        self.messages = list(messages)

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        message = self.messages.pop(0) if self.messages else Message(role="assistant", content=FALLBACK_REPLY)
        return ModelResponse(message=message)

    async def aclose(self) -> None:
        return None


class PlaybackUser:
    """Replays user turns (strings or messages, user-tool calls included), then says ###STOP###."""

    def __init__(self, turns: list[str | Message], *, name: str = "playback") -> None:
        self.turns = list(turns)
        self.name = name

    async def reply(self, history: list[Message]) -> Message:
        if not self.turns:
            return Message(role="user", content="###STOP###")
        turn = self.turns.pop(0)
        return Message(role="user", content=turn) if isinstance(turn, str) else turn


def run_scripted(
    env: Environment,
    task: Task,
    agent_messages: list[Message],
    user_turns: list[str | Message] | None = None,
    *,
    max_steps: int = 400,
    env_name: str = "tau2",
    split: str = "base",
) -> Trajectory:
    """One episode: the agent plays `agent_messages`, the user `user_turns` (default: one request), then stops."""
    agent = Agent(PlaybackClient(agent_messages), "scripted", env.tool_schemas())
    user = PlaybackUser(list(user_turns) if user_turns is not None else ["Hi, I need help with my request."])
    spec = EpisodeSpec(env=env_name, split=split)
    limits = EpisodeLimits(max_steps=max_steps)
    return asyncio.run(run_episode(env=env, task=task, agent=agent, user=user, spec=spec, limits=limits))
