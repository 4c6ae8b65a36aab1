"""One reading of a conversation's opening (`trace_rl.messages`): evaluation's routed client, the serving proxy and the
endpoint pool route or key one conversation on the same system prompt and first user message."""

from __future__ import annotations

import asyncio

from trace_rl.engine.episode import GREETING
from trace_rl.engine.text_driver import domain_agent
from trace_rl.envs.registry import load_domain
from trace_rl.evaluate.episodes import RoutedClient
from trace_rl.messages import first_user_text, system_text
from trace_rl.models.chat_format import to_openai_messages
from trace_rl.models.pool import conversation_key
from trace_rl.models.scripted import ScriptedClient
from trace_rl.routing.router import ScriptedRouter
from trace_rl.serve.wire import first_turn
from trace_rl.types import Message, ToolCall


def test_first_user_text_skips_examples_tool_calls_and_empty_turns():
    call = ToolCall(id="u0", name="toggle", arguments={}, requestor="user")
    messages = [
        Message(role="system", content="sys"),
        Message(role="user", content="an example question", example=True),
        Message(role="assistant", content="an example answer", example=True),
        Message(role="assistant", content=GREETING),
        Message(role="user", tool_calls=[call]),
        Message(role="user", content="  "),
        Message(role="user", content="renew my loan"),
    ]
    assert first_user_text(messages) == "renew my loan" and system_text(messages) == "sys"
    assert first_user_text(messages[:3]) is None and system_text(messages[1:]) is None


def test_routing_serving_and_pooling_read_one_conversation_on_the_same_text():
    """The library agent sends its worked examples (which open with a user turn) before every conversation."""
    domain = load_domain("library")
    client = ScriptedClient(lambda messages, tools: {"content": "ok"})
    router = ScriptedRouter({"renew": "renewals"})
    agent = domain_agent(domain, RoutedClient(client, router, allowed={"renewals"}))
    history = [Message(role="assistant", content=GREETING), Message(role="user", content="Hi! I'd like to renew.")]
    asyncio.run(agent.act(history))
    sent = client.calls[0].messages
    assert any(m.example and m.role == "user" for m in sent)  # the examples are really there

    (routed_on,) = [(first, system) for first, system, _ in router.calls]
    system, first = first_turn(to_openai_messages(sent))  # what the serving proxy routes and keys on
    assert (first, system) == routed_on == ("Hi! I'd like to renew.", domain.system_prompt())
    assert conversation_key(sent) == f"{system}\x00{first}"
