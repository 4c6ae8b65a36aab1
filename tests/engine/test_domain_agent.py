"""Every stage builds the agent the way its domain defines it (worked examples, tool listing in the prompt)."""

from __future__ import annotations

import asyncio

from trace_rl.engine.text_driver import domain_agent
from trace_rl.envs.registry import load_domain
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Message


class PlainDomain:
    def system_prompt(self) -> str:
        return "plain"


def test_library_agent_sends_examples_and_no_schemas():
    domain = load_domain("library")
    client = ScriptedClient(["hello"])
    agent = domain_agent(domain, client, tools=[{"type": "function", "function": {"name": "x"}}])
    asyncio.run(agent.act([Message(role="user", content="hi")]))
    call = client.calls[0]
    examples = domain.example_messages()
    assert examples, "the library prompt format has a worked example"
    assert call.messages[0].content == domain.system_prompt()
    assert call.messages[1 : 1 + len(examples)] == examples and call.messages[-1].content == "hi"
    assert not call.tools  # the prompt lists the tools itself


def test_plain_domain_gets_schemas_and_no_examples():
    client = ScriptedClient(["ok"])
    schema = {"type": "function", "function": {"name": "x"}}
    asyncio.run(domain_agent(PlainDomain(), client, tools=[schema]).act([Message(role="user", content="hi")]))
    assert [m.role for m in client.calls[0].messages] == ["system", "user"] and client.calls[0].tools == [schema]
