"""ToolSandbox's user side: the LLM user's scenario text and a scripted user for tests.

ToolSandbox's user simulator is an LLM with the scenario's instruction as system prompt and one or two few-shot
dialogues, with roles flipped, ending the conversation through the `end_conversation()` tool. trace-rl's generic
`LLMUserSimulator` already flips roles; this module gives it the scenario's instruction (Apple's text, from the data
package) and the few-shot dialogues rendered as text, and asks it to end with `###STOP###`, which the environment
records as the user's `end_conversation()` call (episode.py).
"""

from __future__ import annotations

from typing import Any

from trace_rl.envs.toolsandbox.episode import few_shot_turns, user_instruction
from trace_rl.types import Message

ENDING_NOTE = (
    "You are the user (User A) in the conversation below. When your task is complete, or the other user (User B) "
    "cannot help, end the conversation by replying with exactly ###STOP### (this calls end_conversation())."
)


def user_scenario(scenario: dict[str, Any]) -> str:
    """The instruction plus its few-shot dialogue(s), as the LLM user's scenario text."""
    lines = [user_instruction(scenario).strip(), "", "Example of an earlier conversation (you were User A):"]
    for sender, text in few_shot_turns(scenario):
        who = "User A" if sender == "USER" else "User B"
        lines.append(f"{who}: {'###STOP###' if text.strip() == 'end_conversation()' else text}")
    return "\n".join(lines)


class ToolSandboxScriptedUser:
    """Ends the conversation at the agent's first text reply (after any tool calls): ToolSandbox's scripted
    policy for an agent with no steps left. Deterministic, no model."""

    name = "scripted:end-on-reply"

    async def reply(self, history: list[Message]) -> Message:
        return Message(role="user", content="###STOP###")


__all__ = ["ENDING_NOTE", "ToolSandboxScriptedUser", "user_scenario"]
