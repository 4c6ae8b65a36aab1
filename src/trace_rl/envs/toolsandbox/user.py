"""ToolSandbox's user side: its LLM user simulator, the scenario text for the generic one, and a scripted user.

ToolSandbox (Lu et al. 2024) plays the user with an LLM that sees the messages visible to USER: every SYSTEM -> USER
message as a system turn (one per few-shot block, then this scenario's instruction), its own example and live turns as
`assistant` turns, the agent's replies as `user` turns, and its `end_conversation()` calls as tool calls; it ends the
episode by calling the `end_conversation` tool. `ToolSandboxLLMUser` builds exactly that prompt from the scenario's
seeded messages (Apple's instruction text and few-shot dialogues, from the data package) and passes the scenario's
user tool schemas. Departures: a few-shot `end_conversation()` call is followed by a tool result `None` (what the
tool returns; chat formats want a result after a call, upstream's example has none); when the model calls
`end_conversation` the user's message is trace-rl's stop token `###STOP###`, which the environment records as the
user's `end_conversation()` (episode.py); a model that writes `###STOP###` instead ends the episode the same way.
`user_scenario` renders the same material as text for the generic `LLMUserSimulator` (used by callers that build
that one themselves).
"""

from __future__ import annotations

from typing import Any

from trace_rl.envs.toolsandbox.episode import few_shot_turns, user_instruction
from trace_rl.envs.users import is_stop
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Message, ToolCall

STOP = "###STOP###"
END_CALL = "end_conversation()"
ENDING_NOTE = (
    "You are the user (User A) in the conversation below. When your task is complete, or the other user (User B) "
    "cannot help, end the conversation by replying with exactly ###STOP### (this calls end_conversation())."
)


def user_scenario(scenario: dict[str, Any]) -> str:
    """The instruction plus its few-shot dialogue(s), as the generic LLM user's scenario text."""
    lines = [user_instruction(scenario).strip(), "", "Example of an earlier conversation (you were User A):"]
    for sender, text in few_shot_turns(scenario):
        who = "User A" if sender == "USER" else "User B"
        lines.append(f"{who}: {STOP if text.strip() == END_CALL else text}")
    return "\n".join(lines)


def seeded_user_prompt(scenario: dict[str, Any]) -> list[Message]:
    """The seeded messages the user simulator sees, as its chat turns (roles flipped): few-shot blocks, this
    scenario's instruction, then the first user message (its own turn)."""
    out: list[Message] = []
    rows = scenario["initial_databases"]["SANDBOX"]["rows"]
    n = 0
    for r in rows:
        sender, recipient, visible = r.get("sender"), r.get("recipient"), r.get("visible_to")
        if sender is None or (visible is not None and "USER" not in visible):
            continue
        if sender == "SYSTEM" and recipient == "USER":
            out.append(Message(role="system", content=r["content"]))
        elif sender == "USER" and recipient == "EXECUTION_ENVIRONMENT":
            n += 1
            call = ToolCall(id=f"fewshot_{n}", name="end_conversation", arguments={}, requestor="user")
            out.append(Message(role="assistant", tool_calls=[call], example=True))
            out.append(Message(role="tool", content="None", tool_call_id=call.id, name=call.name, example=True))
        elif sender == "USER" and recipient == "AGENT":
            out.append(Message(role="assistant", content=r["content"], example=visible == ["USER"]))
        elif sender == "AGENT" and recipient == "USER":
            out.append(Message(role="user", content=r["content"], example=True))
    return out


class ToolSandboxLLMUser:
    """ToolSandbox's LLM user on any model client: seeded prompt, live turns flipped, ends via `end_conversation`."""

    def __init__(
        self, client: ModelClient, scenario: dict[str, Any], *, sampling: SamplingParams | None = None
    ) -> None:
        self.client = client
        self.name = f"llm:{client.name}"
        self.seed = seeded_user_prompt(scenario)
        self.tools = list(scenario.get("user_tool_schemas") or [])
        self.sampling = sampling or SamplingParams(temperature=0.0)

    def prompt(self, history: list[Message]) -> list[Message]:
        """The chat the user model sees: the seeded turns, then the live ones after the first user message."""
        flipped = list(self.seed)
        for m in history[1:] if history and history[0].role == "user" else history:
            if m.role == "assistant" and m.content:
                flipped.append(Message(role="user", content=m.content))
            elif m.role == "user" and m.content:
                flipped.append(Message(role="assistant", content=m.content))
        return flipped

    async def reply(self, history: list[Message]) -> Message:
        response = await self.client.chat(self.prompt(history), self.tools, sampling=self.sampling)
        message = response.message
        if any(c.name == "end_conversation" for c in message.tool_calls or []):
            return Message(role="user", content=STOP)
        text = message.content or ""
        return Message(role="user", content=STOP if is_stop(text) else text)


class ToolSandboxScriptedUser:
    """Ends the conversation at the agent's first text reply (after any tool calls): ToolSandbox's scripted
    policy for an agent with no steps left. Deterministic, no model."""

    name = "scripted:end-on-reply"

    async def reply(self, history: list[Message]) -> Message:
        return Message(role="user", content=STOP)


__all__ = [
    "ENDING_NOTE",
    "ToolSandboxLLMUser",
    "ToolSandboxScriptedUser",
    "seeded_user_prompt",
    "user_scenario",
]
