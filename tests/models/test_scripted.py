"""ScriptedClient: playback of every item kind, exhaustion policies, call recording, fake and real token ids."""

from __future__ import annotations

import asyncio

import pytest

from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.scripted import ScriptedClient, ScriptExhaustedError, fake_token_ids
from trace_rl.types import Message

USER = [Message(role="user", content="hi")]


def _chat(client: ScriptedClient, messages: list[Message] = USER, **kw):
    return asyncio.run(client.chat(messages, **kw))


def test_plays_back_every_item_kind_in_order() -> None:
    seen: list[int] = []

    def logic(messages: list[Message], tools: list[dict] | None) -> str:
        seen.append(len(messages))
        return f"you sent {len(messages)} messages"

    client = ScriptedClient(
        [
            "hello",
            '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>',
            {"tool_calls": [{"name": "g", "arguments": {"b": 2}}], "thought": "why"},
            {"content": "plain"},
            Message(role="assistant", content="a message"),
            logic,
        ]
    )
    assert isinstance(client, ModelClient)
    r = [_chat(client) for _ in range(6)]
    assert r[0].message.content == "hello" and r[0].finish_reason == "stop"
    call = (r[1].message.tool_calls or [])[0]
    assert (call.name, call.arguments, call.id) == ("f", {"a": 1}, "call_1_0")
    assert r[1].finish_reason == "tool_calls"
    assert (r[2].message.tool_calls or [])[0].arguments == {"b": 2} and r[2].message.thought == "why"
    assert r[3].message.content == "plain"
    assert r[4].message.content == "a message"
    assert r[5].message.content == "you sent 1 messages" and seen == [1]
    assert client.remaining == 0


def test_dict_with_bad_argument_string_sets_parse_error() -> None:
    client = ScriptedClient([{"tool_calls": [{"name": "f", "arguments": "{bad"}]}])
    call = (_chat(client).message.tool_calls or [])[0]
    assert call.parse_error is not None and call.raw == "{bad" and call.arguments == {}


def test_exhaustion_policies() -> None:
    raising = ScriptedClient(["one"])
    _chat(raising)
    with pytest.raises(ScriptExhaustedError):
        _chat(raising)
    repeat = ScriptedClient(['<tool_call>{"name": "f", "arguments": {}}</tool_call>'], on_exhausted="repeat_last")
    first, again = _chat(repeat), _chat(repeat)
    assert again.message.tool_calls == first.message.tool_calls
    text = ScriptedClient([], on_exhausted="text", exhausted_text="###STOP###")
    assert _chat(text).message.content == "###STOP###"


def test_callable_script_answers_every_call() -> None:
    client = ScriptedClient(lambda messages, tools: {"content": f"{len(tools or [])} tools"})
    for _ in range(3):
        assert _chat(client, tools=[{"name": "t"}]).message.content == "1 tools"


def test_records_calls_as_copies() -> None:
    client = ScriptedClient(["a", "b"])
    convo = [Message(role="user", content="first")]
    sp = SamplingParams(temperature=0.0)
    _chat(client, convo, tools=[{"name": "t"}], adapter="cap_x", sampling=sp)
    convo[0].content = "mutated"
    _chat(client, convo)
    assert len(client.calls) == 2
    assert client.calls[0].messages[0].content == "first"
    assert client.calls[0].adapter == "cap_x" and client.calls[0].tools == [{"name": "t"}]
    assert client.calls[0].sampling == sp and client.calls[1].adapter is None


def test_no_token_ids_unless_asked() -> None:
    r = _chat(ScriptedClient(["x"]))
    assert r.message.sampled is None and r.completion_tokens == 0


def test_fake_token_ids_are_stable() -> None:
    client = ScriptedClient(["the same answer", "the same answer"], fake_tokens=True)
    a, b = _chat(client), _chat(client)
    assert a.message.sampled is not None and b.message.sampled is not None
    assert a.message.sampled.completion_ids == b.message.sampled.completion_ids
    assert a.message.sampled.completion_ids[:-1] == fake_token_ids("the same answer")
    assert len(a.message.sampled.logprobs or []) == len(a.message.sampled.completion_ids)
    assert a.completion_tokens == len(a.message.sampled.completion_ids)
    assert a.prompt_tokens == len(a.message.sampled.prompt_ids or []) > 0
    assert fake_token_ids("hello world") != fake_token_ids("hello there")


def test_real_token_ids_from_a_tokenizer(tiny_tokenizer) -> None:
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    client = ScriptedClient([text], tokenizer=tiny_tokenizer)
    r = _chat(client, tools=[{"name": "f", "parameters": {"type": "object"}}])
    sampled = r.message.sampled
    assert sampled is not None
    assert sampled.completion_ids[-1] == tiny_tokenizer.eos_token_id
    assert tiny_tokenizer.decode(sampled.completion_ids[:-1]) == text
    prompt = tiny_tokenizer.decode(sampled.prompt_ids)
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n") and '"name": "f"' in prompt
