"""What routing, serving and endpoint pooling read off a conversation: its system prompt and its first user message.

One definition for all three, so the router picks an adapter for a conversation on the same text whether it runs in
evaluation (`evaluate.episodes.RoutedClient`), in the serving proxy (`serve.wire.first_turn`, which adapts OpenAI wire
dicts) or keys an endpoint (`models.pool.conversation_key`). Worked-example turns (`Message.example`) are part of the
agent's prompt, shared by every conversation, so they are skipped; so are the user's tool calls (not text) and empty
user turns.
"""

from __future__ import annotations

from collections.abc import Iterable

from trace_rl.types import Message


def first_user_text(messages: Iterable[Message]) -> str | None:
    """The text of the conversation's first user message, or None before the user has said anything."""
    for m in messages:
        if m.role == "user" and not m.example and not m.tool_calls and m.content and m.content.strip():
            return m.content
    return None


def system_text(messages: Iterable[Message]) -> str | None:
    """The text of the first system message, or None without one."""
    return next((m.text for m in messages if m.role == "system"), None)
