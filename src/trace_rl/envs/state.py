"""Applying a task's initial state (τ²-bench `set_state`): data deep-merge, initialization actions, message history."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trace_rl.types import Message, Task, ToolCall

if TYPE_CHECKING:
    from trace_rl.envs.base import ToolkitEnvironment


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Dicts merge recursively; lists and scalars are replaced (τ² `update_db`)."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def history_to_messages(history: list[dict[str, Any]]) -> list[Message]:
    """τ²-format message dicts -> Messages (tool results carry the call id under `id`)."""
    messages: list[Message] = []
    for raw in history:
        role = raw["role"]
        calls = None
        if raw.get("tool_calls"):
            calls = [
                ToolCall(
                    id=c.get("id") or f"hist_{i}",
                    name=c["name"],
                    arguments=c.get("arguments") or {},
                    requestor=c.get("requestor", "assistant" if role == "assistant" else "user"),
                )
                for i, c in enumerate(raw["tool_calls"])
            ]
        if role == "tool":
            content = raw.get("content")
            messages.append(
                Message(
                    role="tool",
                    content=content if isinstance(content, str) else json.dumps(content),
                    tool_call_id=raw.get("id") or raw.get("tool_call_id") or "",
                    error=bool(raw.get("error", False)),
                )
            )
        else:
            messages.append(Message(role=role, content=None if calls else raw.get("content"), tool_calls=calls))
    return messages


def apply_initial_state(env: ToolkitEnvironment, task: Task, *, with_history: bool = True) -> list[Message]:
    state = task.initial_state
    if state is None:
        return []
    data = state.initialization_data
    if data is not None:
        if data.get("agent_data"):
            db = env.tools.db
            env.tools.db = type(db).model_validate(deep_merge(db.model_dump(mode="python"), data["agent_data"]))
        if data.get("user_data") and env.user_tools is not None:
            udb = env.user_tools.db
            env.user_tools.db = type(udb).model_validate(deep_merge(udb.model_dump(mode="python"), data["user_data"]))
    for action in state.initialization_actions or []:
        kit = env.toolkit_for(action.env_type)
        if kit is not None:
            kit.call_method(action.func_name, **action.arguments)
    if not with_history or not state.message_history:
        return []
    messages = history_to_messages(state.message_history)
    for message in messages:
        for call in message.tool_calls or []:
            env.execute(call)
    return messages
