"""Convert trace-rl `Message`s to the two chat formats backends need: OpenAI wire dicts and chat-template dicts.

Also: tool schemas normalised to the OpenAI form, a ChatML + tools chat template (used by the tiny model and for
tokenizers that have none), a probe of what a tokenizer's chat template renders, and prompt rendering that lists the
tools in the system message when the template ignores `tools`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trace_rl.models.toolcall_parse import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, render_message_text
from trace_rl.types import Message

# ChatML with tools: a system block listing the tools, assistant tool calls as <tool_call> JSON, tool results as role
# `tool`. Prefix-preserving: a conversation's rendering starts with the rendering of each of its prefixes.
CHATML_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Their JSON schemas:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, answer with <tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\\n'
    "</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- if message.tool_calls %}"
    "{%- for tc in message.tool_calls %}"
    "{%- set f = tc.function if tc.function is defined else tc %}"
    "{%- if loop.first and message.content %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n' + ({'name': f.name, 'arguments': f.arguments} | tojson) + '\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def normalize_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tool schemas in the OpenAI form `{"type": "function", "function": {name, description, parameters}}`."""
    if not tools:
        return None
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool.get("function"), dict):
            out.append({"type": tool.get("type", "function"), "function": tool["function"]})
        else:
            out.append({"type": "function", "function": tool})
    return out


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """A compact tool listing for models whose chat template ignores `tools`."""
    schemas = [t["function"] for t in normalize_tools(tools) or []]
    listing = json.dumps(schemas, ensure_ascii=False, separators=(",", ":"))
    return (
        f"# Tools\nYou can call these functions (JSON schemas):\n{listing}\n"
        f'To call a function, answer with {TOOL_CALL_OPEN}{{"name": "<function name>", "arguments": {{...}}}}'
        f"{TOOL_CALL_CLOSE}."
    )


EXAMPLE_NAME_PREFIX = "example_"


def to_openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages in the OpenAI chat-completions wire format (tool-call arguments as JSON strings).

    Worked-example user and assistant turns carry `name: example_user / example_assistant` (the OpenAI few-shot
    convention), so a routing proxy can tell them from the conversation's own turns; chat templates ignore `name`."""
    out: list[dict[str, Any]] = []
    for m in messages:
        out.append(_openai_message(m))
        if m.example and m.role in ("user", "assistant"):
            out[-1]["name"] = f"{EXAMPLE_NAME_PREFIX}{m.role}"
    return out


def _openai_message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""}
    if m.role == "assistant" and m.tool_calls:
        calls = [
            {
                "id": c.id,
                "type": "function",
                # Arguments that did not parse go back as {}: servers (vLLM) json-decode them and reject bad JSON.
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(c.arguments if c.parse_error is None else {}, ensure_ascii=False),
                },
            }
            for c in m.tool_calls
        ]
        return {"role": "assistant", "content": m.thought or None, "tool_calls": calls}
    return {"role": m.role, "content": render_message_text(m)}


def to_template_messages(messages: list[Message], *, inline_tool_calls: bool) -> list[dict[str, Any]]:
    """Messages as chat-template dicts. Tool calls go in `tool_calls` (arguments as dicts) unless `inline_tool_calls`,
    or unless one of them failed to parse: such messages are rendered as the text the model wrote."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            d: dict[str, Any] = {"role": "tool", "content": m.content or "", "tool_call_id": m.tool_call_id}
            if m.name:
                d["name"] = m.name
            out.append(d)
        elif m.role == "assistant" and m.tool_calls:
            if inline_tool_calls or any(c.parse_error is not None for c in m.tool_calls):
                out.append({"role": "assistant", "content": render_message_text(m)})
            else:
                calls = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
                out.append({"role": "assistant", "content": m.thought or "", "tool_calls": calls})
        else:
            out.append({"role": m.role, "content": render_message_text(m)})
    return out


def add_tool_listing(template_messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put the tool listing into the system message (appended to an existing one, or as a new first message)."""
    listing = tools_system_text(tools)
    msgs = [dict(m) for m in template_messages]
    if msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = f"{msgs[0]['content']}\n\n{listing}" if msgs[0]["content"] else listing
    else:
        msgs.insert(0, {"role": "system", "content": listing})
    return msgs


@dataclass(frozen=True)
class TemplateCaps:
    """What a tokenizer's chat template renders."""

    renders_tools: bool
    renders_tool_calls: bool


_PROBE_TOOL = {
    "type": "function",
    "function": {"name": "zz_probe_tool", "description": "probe", "parameters": {"type": "object", "properties": {}}},
}


def probe_template(tokenizer: Any) -> TemplateCaps:
    """Render probe conversations to learn whether the template shows `tools` and assistant `tool_calls`."""
    user = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    try:
        with_tools = tokenizer.apply_chat_template(
            user, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception:
        with_tools = plain
    call = {"id": "c0", "type": "function", "function": {"name": "zz_probe_call", "arguments": {"x": 1}}}
    convo = [*user, {"role": "assistant", "content": "", "tool_calls": [call]}]
    try:
        rendered = tokenizer.apply_chat_template(convo, tokenize=False)
        renders_calls = "zz_probe_call" in rendered
    except Exception:
        renders_calls = False
    return TemplateCaps(renders_tools=with_tools != plain, renders_tool_calls=renders_calls)


def render_prompt(
    tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]] | None, caps: TemplateCaps
) -> str:
    """The prompt text for the next assistant turn, rendered by the tokenizer's chat template."""
    tmsgs = to_template_messages(messages, inline_tool_calls=not caps.renders_tool_calls)
    norm = normalize_tools(tools)
    if norm and not caps.renders_tools:
        tmsgs = add_tool_listing(tmsgs, norm)
        norm = None
    kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if norm:
        kwargs["tools"] = norm
    return tokenizer.apply_chat_template(tmsgs, **kwargs)
