"""User simulators: the LLM-driven one of τ²-bench (guidelines + scenario, role-flipped history) and scripted ones.

The LLM user sees the agent's text messages as "user" turns and its own as "assistant" turns (docs/tau2-fidelity.md
§2); it ends the conversation with one of the stop tokens. Scripted users are deterministic and need no model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Message, Task

STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")


def is_stop(text: str | None) -> bool:
    return bool(text) and any(token in text for token in STOP_TOKENS)


@runtime_checkable
class UserSimulator(Protocol):
    """Plays the customer. `history` holds the messages the user can see (agent text, own turns, own tool results)."""

    name: str

    async def reply(self, history: list[Message]) -> Message: ...


def render_scenario(scenario: dict[str, Any] | str | None) -> str:
    """τ²-bench's scenario block: Persona, then Instructions with its labelled fields."""
    if scenario is None:
        return ""
    if isinstance(scenario, str):
        return scenario
    parts: list[str] = []
    if scenario.get("persona"):
        parts.append("Persona:\n\t" + str(scenario["persona"]).replace("\n", "\n\t"))
    instructions = scenario.get("instructions")
    if isinstance(instructions, dict):
        labels = [
            ("domain", "Domain"),
            ("reason_for_call", "Reason for call"),
            ("known_info", "Known info"),
            ("unknown_info", "Unknown info"),
            ("task_instructions", "Task instructions"),
        ]
        lines = [f"\t{label}: {instructions[key]}" for key, label in labels if instructions.get(key)]
        parts.append("Instructions:\n" + "\n".join(lines))
    elif instructions:
        parts.append("Instructions:\n\t" + str(instructions).replace("\n", "\n\t"))
    return "\n".join(parts)


class LLMUserSimulator:
    """τ²-bench's user simulator on any model client."""

    def __init__(
        self,
        client: ModelClient,
        task: Task,
        guidelines: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        sampling: SamplingParams | None = None,
    ) -> None:
        self.client = client
        self.name = f"llm:{client.name}"
        self.tools = tools or None
        self.sampling = sampling or SamplingParams(temperature=0.0)
        self.system = f"{guidelines.strip()}\n\n<scenario>\n{render_scenario(task.user_scenario)}\n</scenario>"

    def flip(self, history: list[Message]) -> list[Message]:
        flipped = [Message(role="system", content=self.system)]
        for m in history:
            if m.role == "assistant" and m.content:
                flipped.append(Message(role="user", content=m.content))
            elif m.role == "user":
                flipped.append(m.model_copy(update={"role": "assistant", "sampled": None}))
            elif m.role == "tool":
                flipped.append(m)
        return flipped

    async def reply(self, history: list[Message]) -> Message:
        response = await self.client.chat(self.flip(history), self.tools, sampling=self.sampling)
        message = response.message
        if message.tool_calls:
            calls = [c.model_copy(update={"requestor": "user"}) for c in message.tool_calls]
            return Message(role="user", tool_calls=calls)
        return Message(role="user", content=message.content or message.thought or "")


class ScriptedUser:
    """Says the given lines in order, then stops. A line may be a callable of the visible history."""

    def __init__(self, lines: list[str | Callable[[list[Message]], str]], *, name: str = "scripted") -> None:
        self.lines = list(lines)
        self.name = name
        self._i = 0

    async def reply(self, history: list[Message]) -> Message:
        if self._i >= len(self.lines):
            return Message(role="user", content="###STOP###")
        line = self.lines[self._i]
        self._i += 1
        return Message(role="user", content=line(history) if callable(line) else line)
