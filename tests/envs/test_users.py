"""The LLM user simulator: role-flipped history, scenario rendering, stop tokens; and it runs on a real tiny model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from trace_rl.config import ModelConfig
from trace_rl.envs.users import LLMUserSimulator, is_stop, render_scenario
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Message, Task, ToolCall

TASK = Task(
    id="t",
    user_scenario={
        "persona": "Brief.",
        "instructions": {"reason_for_call": "Renew my loan.", "known_info": "Email ana@example.org", "domain": "x"},
    },
)


def test_scenario_rendering_has_labelled_fields():
    text = render_scenario(TASK.user_scenario)
    assert text.splitlines()[0] == "Persona:"
    assert "\tReason for call: Renew my loan." in text and "\tKnown info: Email ana@example.org" in text
    assert text.index("Domain") < text.index("Reason for call")


def test_history_is_role_flipped_and_agent_tool_traffic_hidden():
    client = ScriptedClient(["I want to renew.", "###STOP###"])
    user = LLMUserSimulator(client, TASK, "Be a customer.")
    history = [
        Message(role="assistant", content="Hi! How can I help you today?"),
    ]
    first = asyncio.run(user.reply(history))
    assert first.role == "user" and first.content == "I want to renew."
    history += [
        first,
        Message(role="assistant", tool_calls=[ToolCall(id="c", name="find", arguments={})]),
        Message(role="tool", content="secret", tool_call_id="c"),
        Message(role="assistant", content="Done."),
    ]
    second = asyncio.run(user.reply([m for m in history if m.role != "tool" and not m.tool_calls]))
    assert is_stop(second.content)
    seen = client.calls[1].messages
    assert seen[0].role == "system" and "<scenario>" in seen[0].content and "Renew my loan." in seen[0].content
    assert [m.role for m in seen[1:]] == ["user", "assistant", "user"]
    assert [m.content for m in seen[1:]] == ["Hi! How can I help you today?", "I want to renew.", "Done."]


def test_llm_user_runs_on_a_real_tiny_model(tiny_dir: Path):
    from trace_rl.models.local import LocalClient

    cfg = ModelConfig(kind="local", model=str(tiny_dir), max_tokens=8, temperature=0.0)
    client = LocalClient(cfg, model_path=tiny_dir)
    user = LLMUserSimulator(client, TASK, "Be a customer.")
    reply = asyncio.run(user.reply([Message(role="assistant", content="Hi! How can I help you today?")]))
    assert reply.role == "user" and (reply.content is not None or reply.tool_calls)
