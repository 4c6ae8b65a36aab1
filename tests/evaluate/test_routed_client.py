"""The TRACE arm routes each conversation once, from its own opening request: the domain's worked-example turns,
which every conversation shares, are part of the prompt and must not decide (or collapse) the route."""

from __future__ import annotations

import asyncio

from trace_rl.engine.text_driver import Agent
from trace_rl.envs.library.prompt import example_messages
from trace_rl.evaluate.episodes import RoutedClient
from trace_rl.models.pool import conversation_key
from trace_rl.models.scripted import ScriptedClient
from trace_rl.routing.router import ScriptedRouter
from trace_rl.types import Message


def converse(agent: Agent, opening: str) -> None:
    history = [
        Message(role="assistant", content="Hi! How can I help you today?", turn=0),
        Message(role="user", content=opening, turn=1),
    ]
    asyncio.run(agent.act(history))


def test_each_conversation_is_routed_by_its_own_opening_not_the_examples():
    client = ScriptedClient(lambda messages, tools: {"content": "ok"})
    router = ScriptedRouter({"renew": "renewals", "Who wrote": "lookups"})
    routed = RoutedClient(client, router, allowed={"renewals", "lookups"})
    agent = Agent(routed, "system", [], examples=example_messages())  # the examples open with 'Who wrote ...'
    converse(agent, "Hi! I'd like to renew my loan.")
    converse(agent, 'Who wrote "Forest of Marrow"?')
    converse(agent, "Hi! I'd like to renew my loan.")  # same conversation opening again: no new routing call
    assert [c[0] for c in router.calls] == ["Hi! I'd like to renew my loan.", 'Who wrote "Forest of Marrow"?']
    assert [c.adapter for c in client.calls] == ["renewals", "lookups", "renewals"]


def test_conversation_keys_differ_by_opening_even_with_shared_examples():
    examples = [m.model_copy(update={"example": True}) for m in example_messages()]
    system = Message(role="system", content="s")
    a = [system, *examples, Message(role="user", content="renew please")]
    b = [system, *examples, Message(role="user", content="a hold please")]
    assert conversation_key(a) != conversation_key(b)
