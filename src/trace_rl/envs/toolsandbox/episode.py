"""Turning a trace-rl conversation into a ToolSandbox episode, and scoring it.

The live environment executes each tool call on its own `Sandbox`; scoring replays the whole conversation (user
turns, agent text turns and tool calls, in position) on a fresh `Sandbox` of the scenario, so the evaluator sees
the message log ToolSandbox would have built. Tools are deterministic at the frozen instant (ids from a generator
seeded per episode), so the replay reproduces the live results; a mismatch is reported in the details.
Departures from ToolSandbox: the user's stop token stands for its `end_conversation()` call; several tool calls in
one agent message run one after another (trace-rl's engine executes them one by one), not in every order.
"""

from __future__ import annotations

from typing import Any

from trace_rl.envs.toolsandbox.evaluation import EvaluationResult, evaluate
from trace_rl.envs.toolsandbox.sandbox import Sandbox
from trace_rl.envs.users import is_stop
from trace_rl.types import Message


def first_user_message(scenario: dict[str, Any]) -> str:
    rows = scenario["initial_databases"]["SANDBOX"]["rows"]
    users = [r for r in rows if r.get("sender") == "USER" and r.get("visible_to") != ["USER"]]
    return users[0]["content"] if users else ""


def user_instruction(scenario: dict[str, Any]) -> str:
    """The user simulator's system prompt of this scenario (the last SYSTEM -> USER message of the seed)."""
    rows = scenario["initial_databases"]["SANDBOX"]["rows"]
    system = [r for r in rows if r.get("sender") == "SYSTEM" and r.get("recipient") == "USER"]
    return system[-1]["content"] if system else ""


def few_shot_turns(scenario: dict[str, Any]) -> list[tuple[str, str]]:
    """The user simulator's few-shot turns as (sender, text); `end_conversation()` marks the end of each example."""
    rows = scenario["initial_databases"]["SANDBOX"]["rows"]
    out = []
    for r in rows:
        if r.get("visible_to") == ["USER"] and r.get("sender") in ("USER", "AGENT"):
            out.append((r["sender"], r["content"]))
    return out


def replay(scenario: dict[str, Any], messages: list[Message], now: float) -> tuple[Sandbox, list[str]]:
    """The Sandbox of `messages` (the episode's conversation after the scenario's first user message)."""
    sandbox = Sandbox(scenario, now)
    limit = int(scenario.get("max_messages", 30))
    mismatches: list[str] = []
    pending: dict[str, str] = {}
    started = False
    for m in messages:
        if m.example or not sandbox.active or sandbox.new_messages >= limit:
            continue
        if m.role == "user" and not started:
            started = True  # the seeded first user message is already in the log
            continue
        if m.role == "user" and m.tool_calls:
            if any(c.name == "end_conversation" for c in m.tool_calls):
                sandbox.end_conversation()
        elif m.role == "user":
            if is_stop(m.content):
                sandbox.end_conversation()
            elif m.content:
                sandbox.say("USER", m.content)
        elif m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                if call.parse_error is None and call.name in sandbox.agent_names:
                    result = sandbox.agent_calls([(call.name, call.arguments)])[0]
                    pending[call.id] = result.content
        elif m.role == "assistant" and m.content:
            sandbox.say("AGENT", m.content)
        elif m.role == "tool" and m.tool_call_id in pending and pending.pop(m.tool_call_id) != m.content:
            mismatches.append(m.tool_call_id or "")
    return sandbox, mismatches


def score_conversation(
    scenario: dict[str, Any], messages: list[Message], meta: dict[str, Any], now: float
) -> tuple[EvaluationResult, list[str]]:
    sandbox, mismatches = replay(scenario, messages, now)
    return evaluate(scenario, sandbox.tables, meta), mismatches


__all__ = ["few_shot_turns", "first_user_message", "replay", "score_conversation", "user_instruction"]
