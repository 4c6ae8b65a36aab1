"""The agent's prompt, assembled in one place for every driver: the system prompt, then the environment's worked-example
turns (flagged `example=True`: part of the prompt, not of the episode), then the conversation; and the tool schemas,
unless the system prompt already lists the tools.

The text driver's `Agent` sends `AgentPrompt.messages(history)` with `AgentPrompt.tools` to its model client; the token
driver renders exactly the same messages and tools through the chat template, so training sees the prompt the agent is
deployed with (tested).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.base import Environment
from trace_rl.types import Message, Task


@dataclass(frozen=True)
class AgentPrompt:
    """What precedes the conversation on every agent call, and the tools offered with it."""

    system: str
    examples: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)

    def messages(self, conversation: list[Message]) -> list[Message]:
        return [Message(role="system", content=self.system), *self.examples, *conversation]


def agent_prompt(
    system: str, *, examples: Iterable[Message] | None = None, tools: list[dict[str, Any]] | None = None
) -> AgentPrompt:
    """The prompt of `system`, with `examples` marked as worked-example turns, and `tools` (none: the prompt lists
    them, or there are none)."""
    return AgentPrompt(system, [m.model_copy(update={"example": True}) for m in examples or []], list(tools or []))


def domain_prompt(
    domain: Any, *, system_prompt: str | None = None, tools: list[dict[str, Any]] | None = None
) -> AgentPrompt:
    """The prompt as a domain defines it: its system prompt (or `system_prompt`), its worked-example turns
    (`example_messages()`, if it has them), and `tools` unless the prompt lists the tools (`prompt_lists_tools`)."""
    examples = getattr(domain, "example_messages", None)
    return agent_prompt(
        system_prompt if system_prompt is not None else domain.system_prompt(),
        examples=examples() if callable(examples) else None,
        tools=None if getattr(domain, "prompt_lists_tools", False) else tools,
    )


def agent_tools(source: Any, env: Environment) -> list[dict[str, Any]] | None:
    """The tool schemas to render for the agent: `source.agent_tools(env)` when it has one (None: the prompt lists the
    tools), else the environment's schemas."""
    fn = getattr(source, "agent_tools", None)
    return fn(env) if fn is not None else env.tool_schemas()


def agent_examples(source: Any, task: Task) -> list[Message]:
    """The worked-example turns of `task` (`source.example_messages(task)` is optional; none without it)."""
    fn = getattr(source, "example_messages", None)
    return list(fn(task)) if fn is not None else []


def training_prompt(source: Any, task: Task, env: Environment, *, hinted: bool = False) -> AgentPrompt:
    """The prompt of a training episode of `task` (a `TrainEnv`'s system prompt, hinted or not, its worked-example
    turns and the tools it renders), assembled as `domain_prompt` assembles the deployed agent's."""
    return agent_prompt(
        source.system_prompt(task, hinted=hinted), examples=agent_examples(source, task), tools=agent_tools(source, env)
    )
