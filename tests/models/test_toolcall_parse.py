"""Tool-call parsing: tags, plain JSON, fences, malformed arguments, thoughts, ids, and rendering back."""

from __future__ import annotations

import json

from trace_rl.models.toolcall_parse import parse_completion, render_message_text, render_tool_call
from trace_rl.types import Message, ToolCall


def test_plain_text_is_content() -> None:
    msg = parse_completion("  The order was cancelled.  ")
    assert msg.role == "assistant"
    assert msg.content == "The order was cancelled."
    assert msg.tool_calls is None and msg.thought is None


def test_single_tagged_call() -> None:
    msg = parse_completion('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    assert msg.content is None and msg.thought is None
    assert msg.tool_calls is not None and len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert (call.name, call.arguments, call.parse_error) == ("get_weather", {"city": "Paris"}, None)


def test_multiple_tagged_calls_with_text_go_to_thought() -> None:
    text = (
        "Let me check both.\n"
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": [1, 2]}}</tool_call>\nDone.'
    )
    msg = parse_completion(text, turn=3)
    assert [c.name for c in msg.tool_calls or []] == ["a", "b"]
    assert [c.id for c in msg.tool_calls or []] == ["call_3_0", "call_3_1"]
    assert msg.content is None
    assert msg.thought == "Let me check both.\nDone."
    assert msg.turn == 3


def test_malformed_arguments_never_raise() -> None:
    text = '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "#W1",}}</tool_call>'
    msg = parse_completion(text)
    call = (msg.tool_calls or [])[0]
    assert call.name == "cancel_order"  # recovered from the broken JSON
    assert call.arguments == {}
    assert call.parse_error is not None and "not valid JSON" in call.parse_error
    assert call.raw == '{"name": "cancel_order", "arguments": {"order_id": "#W1",}}'


def test_arguments_as_json_string_and_bad_string() -> None:
    good = parse_completion('<tool_call>{"name": "f", "arguments": "{\\"k\\": 2}"}</tool_call>')
    assert (good.tool_calls or [])[0].arguments == {"k": 2}
    bad = parse_completion('<tool_call>{"name": "f", "arguments": "{k: 2"}</tool_call>')
    assert (bad.tool_calls or [])[0].parse_error is not None
    listy = parse_completion('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>')
    assert "JSON object" in ((listy.tool_calls or [])[0].parse_error or "")


def test_unclosed_tag_from_truncated_generation() -> None:
    msg = parse_completion('Sure <tool_call>{"name": "f", "arguments": {"a": ')
    call = (msg.tool_calls or [])[0]
    assert call.name == "f" and call.parse_error is not None
    assert msg.thought == "Sure"


def test_plain_json_call_and_parameters_alias() -> None:
    msg = parse_completion('{"name": "search_books", "parameters": {"query": "dune"}}')
    call = (msg.tool_calls or [])[0]
    assert (call.name, call.arguments) == ("search_books", {"query": "dune"})
    assert msg.thought is None


def test_fenced_json_call_with_text() -> None:
    text = 'I will search.\n```json\n{"name": "search_books", "arguments": {"query": "dune"}}\n```\n'
    msg = parse_completion(text)
    assert [(c.name, c.arguments) for c in msg.tool_calls or []] == [("search_books", {"query": "dune"})]
    assert msg.thought == "I will search."


def test_plain_json_inside_prose_and_list_and_openai_wrapper() -> None:
    prose = parse_completion('Calling now: {"name": "f", "arguments": {"a": 1}} ok')
    assert (prose.tool_calls or [])[0].arguments == {"a": 1}
    assert prose.thought == "Calling now:\nok"
    listed = parse_completion('[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"b": 2}}]')
    assert [c.name for c in listed.tool_calls or []] == ["f", "g"]
    wrapped = parse_completion('{"type": "function", "function": {"name": "h", "arguments": "{}"}}')
    assert [c.name for c in wrapped.tool_calls or []] == ["h"]


def test_json_that_is_not_a_call_stays_text() -> None:
    for text in ('{"city": "Paris"}', '{"name": "Alice", "age": 3}', "Here: {not json}", "[1, 2, 3]"):
        msg = parse_completion(text)
        assert msg.tool_calls is None and msg.content == text, text


def test_ids_are_deterministic_and_prefixable() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    a, b = parse_completion(text), parse_completion(text)
    assert (a.tool_calls or [])[0].id == (b.tool_calls or [])[0].id
    assert (a.tool_calls or [])[0].id.startswith("call_")
    other = parse_completion(text.replace('"f"', '"g"'))
    assert (other.tool_calls or [])[0].id != (a.tool_calls or [])[0].id
    assert (parse_completion(text, id_prefix="x7").tool_calls or [])[0].id == "x7_0"


def test_render_round_trips() -> None:
    call = ToolCall(id="c1", name="get_weather", arguments={"city": "Zürich", "days": 2})
    text = render_tool_call(call)
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
    assert json.loads(text.split("\n")[1]) == {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}
    back = (parse_completion(text).tool_calls or [])[0]
    assert (back.name, back.arguments) == (call.name, call.arguments)


def test_render_keeps_raw_text_of_failed_parse() -> None:
    broken = (parse_completion("<tool_call>{oops</tool_call>").tool_calls or [])[0]
    assert render_tool_call(broken) == "<tool_call>\n{oops\n</tool_call>"


def test_render_message_text() -> None:
    msg = Message(role="assistant", thought="thinking", tool_calls=[ToolCall(id="c", name="f", arguments={})])
    assert render_message_text(msg) == 'thinking\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert render_message_text(Message(role="assistant", content="hi")) == "hi"
