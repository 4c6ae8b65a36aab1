"""Message conversion to OpenAI wire and chat-template dicts, template probing, and prompt rendering."""

from __future__ import annotations

import copy
import json

from trace_rl.models.chat_format import (
    normalize_tools,
    probe_template,
    render_prompt,
    to_openai_messages,
    to_template_messages,
)
from trace_rl.types import Message, ToolCall

TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
PLAIN_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _conversation() -> list[Message]:
    return [
        Message(role="system", content="You are helpful."),
        Message(role="user", content="Weather in Paris?"),
        Message(
            role="assistant",
            thought="Checking.",
            tool_calls=[ToolCall(id="call_2_0", name="get_weather", arguments={"city": "Paris"})],
        ),
        Message(role="tool", tool_call_id="call_2_0", name="get_weather", content="sunny"),
    ]


def test_normalize_tools_accepts_both_forms() -> None:
    wrapped = {"type": "function", "function": TOOL}
    assert normalize_tools([TOOL]) == [wrapped]
    assert normalize_tools([wrapped]) == [wrapped]
    assert normalize_tools(None) is None and normalize_tools([]) is None


def test_openai_wire_format() -> None:
    wire = to_openai_messages(_conversation())
    assert wire[2] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_2_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert wire[3] == {"role": "tool", "tool_call_id": "call_2_0", "content": "sunny"}
    broken = Message(role="assistant", tool_calls=[ToolCall(id="c", name="f", parse_error="bad", raw="{oops")])
    assert to_openai_messages([broken])[0]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_template_messages_structured_inline_and_parse_error() -> None:
    structured = to_template_messages(_conversation(), inline_tool_calls=False)
    assert structured[2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert structured[3]["role"] == "tool" and structured[3]["name"] == "get_weather"
    inline = to_template_messages(_conversation(), inline_tool_calls=True)
    assert "tool_calls" not in inline[2]
    assert inline[2]["content"].startswith("Checking.\n<tool_call>\n")
    broken = Message(role="assistant", tool_calls=[ToolCall(id="c", name="f", parse_error="bad", raw="{oops")])
    assert to_template_messages([broken], inline_tool_calls=False)[0]["content"] == "<tool_call>\n{oops\n</tool_call>"


def test_probe_template(tiny_tokenizer) -> None:
    caps = probe_template(tiny_tokenizer)
    assert caps.renders_tools and caps.renders_tool_calls
    plain = copy.deepcopy(tiny_tokenizer)
    plain.chat_template = PLAIN_CHATML
    caps = probe_template(plain)
    assert not caps.renders_tools and not caps.renders_tool_calls


def test_render_prompt_lists_tools_when_template_ignores_them(tiny_tokenizer) -> None:
    plain = copy.deepcopy(tiny_tokenizer)
    plain.chat_template = PLAIN_CHATML
    text = render_prompt(plain, _conversation(), [TOOL], probe_template(plain))
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou are helpful.\n\n# Tools")
    assert json.dumps([TOOL], separators=(",", ":")) in system
    assert "<tool_call>" in system
    assert '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather"' in text
    assert "<|im_start|>tool\nsunny<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    no_system = render_prompt(plain, _conversation()[1:2], [TOOL], probe_template(plain))
    assert no_system.startswith("<|im_start|>system\n# Tools")


def test_tiny_template_renders_tools_and_is_prefix_preserving(tiny_tokenizer) -> None:
    caps = probe_template(tiny_tokenizer)
    convo = _conversation()
    before = render_prompt(tiny_tokenizer, convo[:2], [TOOL], caps)
    assert '"name": "get_weather"' in before.split("<|im_end|>")[0]
    full = render_prompt(tiny_tokenizer, convo, [TOOL], caps)
    completion = (
        'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    )
    assert full.startswith(before + completion)
