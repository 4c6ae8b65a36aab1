"""Parse an assistant completion into a `Message` with tool calls, and render a tool call back to text.

Recognised forms, in this order:
1. Qwen/Hermes tags: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one or several (an unclosed last tag,
   as in a truncated generation, runs to the end of the text);
2. plain JSON objects `{"name": ..., "arguments": ...}` (`parameters` is an alias of `arguments`; a list of such
   objects and the OpenAI `{"type": "function", "function": {...}}` wrapper are accepted), bare or inside ``` fences;
3. anything else is plain text.

Text outside the tool calls becomes `Message.thought` (a message never carries both `content` and `tool_calls`). A
tagged call whose body is not valid JSON becomes a `ToolCall` with `parse_error` set and the body kept in `raw`; parsing
never raises. Call ids are deterministic: `<prefix>_<i>`, the prefix being the caller's, `call_<turn>`, or
`call_<hash>` of the text.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from trace_rl.types import Message, Role, ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_DECODER = json.JSONDecoder()


def call_id_prefix(text: str, *, turn: int | None = None, prefix: str | None = None) -> str:
    """The id prefix for calls parsed from `text`: the caller's prefix, `call_<turn>`, or `call_<8 hex of the text>`."""
    if prefix:
        return prefix
    if turn is not None:
        return f"call_{turn}"
    return "call_" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def parse_arguments(value: Any) -> tuple[dict[str, Any], str | None]:
    """Decode tool-call arguments given as a dict, a JSON string, or None. Returns (arguments, error or None)."""
    if value is None:
        return {}, None
    if isinstance(value, dict):
        return value, None
    if isinstance(value, str):
        if not value.strip():
            return {}, None
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            return {}, f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
        if isinstance(decoded, dict):
            return decoded, None
        return {}, f"arguments must be a JSON object, got {type(decoded).__name__}"
    return {}, f"arguments must be a JSON object, got {type(value).__name__}"


def _call_fields(obj: Any) -> tuple[str, Any] | None:
    """(name, arguments) when `obj` looks like a tool call, else None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    if "arguments" in obj:
        return name, obj["arguments"]
    if "parameters" in obj:
        return name, obj["parameters"]
    return None


def _objects_to_calls(
    decoded: Any, raw: str, *, require_args: bool
) -> list[tuple[str, dict[str, Any], str | None, str]]:
    """Tool calls in a decoded JSON value (an object or a list of objects); empty if it is not a tool call."""
    items = decoded if isinstance(decoded, list) else [decoded]
    out: list[tuple[str, dict[str, Any], str | None, str]] = []
    for item in items:
        fields = _call_fields(item)
        if fields is None and not require_args and isinstance(item, dict) and isinstance(item.get("name"), str):
            fields = (item["name"], None)
        if fields is None:
            return []
        args, err = parse_arguments(fields[1])
        out.append((fields[0], args, err, raw))
    return out


def _parse_tagged_body(body: str) -> list[tuple[str, dict[str, Any], str | None, str]]:
    """Calls inside one `<tool_call>` block; a body that is not a valid call yields one call with `parse_error`."""
    text = body.strip()
    fence = _FENCE.fullmatch(text)
    if fence:
        text = fence.group(2).strip()
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as exc:
        match = _NAME.search(text)
        name = match.group(1) if match else ""
        return [(name, {}, f"tool call is not valid JSON: {exc.msg} at position {exc.pos}", body.strip())]
    calls = _objects_to_calls(decoded, body.strip(), require_args=False)
    if calls:
        return calls
    match = _NAME.search(text)
    name = match.group(1) if match else ""
    return [(name, {}, 'tool call must be a JSON object with "name" and "arguments"', body.strip())]


def _scan_json_calls(text: str) -> tuple[list[tuple[str, dict[str, Any], str | None, str]], list[tuple[int, int]]]:
    """Plain JSON tool calls anywhere in `text` (bare, or fenced). Returns the calls and the spans they occupied."""
    calls: list[tuple[str, dict[str, Any], str | None, str]] = []
    spans: list[tuple[int, int]] = []
    for fence in _FENCE.finditer(text):
        inner = fence.group(2).strip()
        try:
            decoded = json.loads(inner)
        except json.JSONDecodeError:
            continue
        found = _objects_to_calls(decoded, inner, require_args=True)
        if found:
            calls.extend(found)
            spans.append(fence.span())
    if calls:
        return calls, spans
    pos = 0
    while True:
        start = _next_json_start(text, pos)
        if start < 0:
            break
        try:
            decoded, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        found = _objects_to_calls(decoded, text[start:end], require_args=True)
        if found:
            calls.extend(found)
            spans.append((start, end))
        pos = end
    return calls, spans


def _next_json_start(text: str, pos: int) -> int:
    starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
    return min(starts) if starts else -1


def _remove_spans(text: str, spans: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    last = 0
    for start, end in sorted(spans):
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "\n".join(p.strip() for p in pieces if p.strip())


def parse_completion(
    text: str,
    *,
    turn: int | None = None,
    id_prefix: str | None = None,
    role: Role = "assistant",
) -> Message:
    """Turn a completion into a Message: tool calls (text outside them in `thought`) or plain `content`."""
    prefix = call_id_prefix(text, turn=turn, prefix=id_prefix)
    found: list[tuple[str, dict[str, Any], str | None, str]] = []
    spans: list[tuple[int, int]] = []
    for match in _TAGGED.finditer(text):
        found.extend(_parse_tagged_body(match.group(1)))
        spans.append(match.span())
    if not found:
        found, spans = _scan_json_calls(text)
    requestor = "user" if role == "user" else "assistant"
    if not found:
        return Message(role=role, content=text.strip(), turn=turn)
    calls = [
        ToolCall(id=f"{prefix}_{i}", name=name, arguments=args, parse_error=err, raw=raw, requestor=requestor)
        for i, (name, args, err, raw) in enumerate(found)
    ]
    thought = _remove_spans(text, spans) or None
    return Message(role=role, tool_calls=calls, thought=thought, turn=turn)


def has_tool_call_markup(text: str | None) -> bool:
    """Whether the text contains a `<tool_call>` tag."""
    return text is not None and TOOL_CALL_OPEN in text


def tool_call_json(call: ToolCall) -> str:
    """The JSON body of a tool call, `{"name": ..., "arguments": {...}}`; the raw body when its parse failed."""
    if call.parse_error is not None and call.raw is not None:
        return call.raw
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def render_tool_call(call: ToolCall) -> str:
    """A tool call in the Qwen/Hermes form `<tool_call>\\n{json}\\n</tool_call>`."""
    return f"{TOOL_CALL_OPEN}\n{tool_call_json(call)}\n{TOOL_CALL_CLOSE}"


def render_message_text(message: Message) -> str:
    """The assistant text a message stands for: content, or thought followed by its rendered tool calls."""
    if not message.tool_calls:
        return message.content or ""
    parts = [message.thought] if message.thought else []
    parts.extend(render_tool_call(c) for c in message.tool_calls)
    return "\n".join(parts)
