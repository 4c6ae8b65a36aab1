"""The OpenAI chat-completions wire format, as the proxy needs it: reading a request's conversation (first user
message, system prompt, `Message`s for the local backend), checking its sampling fields (`check_sampling`: a
malformed field is a 400 with an OpenAI error body naming it, never a 500), and writing completions, SSE chunks and
errors.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any

from trace_rl.messages import first_user_text, system_text
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.models.chat_format import EXAMPLE_NAME_PREFIX
from trace_rl.models.toolcall_parse import parse_arguments
from trace_rl.types import Message, ToolCall


class WireError(ValueError):
    """A request the proxy cannot serve; answered with HTTP `status` and an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_body(
    message: str, status: int, kind: str = "invalid_request_error", *, param: str | None = None, code: Any = None
) -> dict[str, Any]:
    """OpenAI's error object: message, type, param and code (the HTTP status unless a code string is given)."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status if code is None else code}}


# sampling fields checked before any backend sees the request: name -> (kind, low, high); None: unbounded
NUMBERS = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "presence_penalty": (-2.0, 2.0)}
NUMBERS |= {"frequency_penalty": (-2.0, 2.0), "repetition_penalty": (0.0, 2.0), "min_p": (0.0, 1.0)}
INTEGERS = {"max_tokens": (1, None), "max_completion_tokens": (1, None), "n": (1, 16), "top_k": (-1, None)}
INTEGERS |= {"seed": (None, None), "top_logprobs": (0, 20)}
MAX_STOP = 16


def _bounds(name: str, value: float, low: float | None, high: float | None) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        lo, hi = ("-inf" if low is None else low), ("inf" if high is None else high)
        raise WireError(f"`{name}` must be between {lo} and {hi} (got {value})", param=name)


def check_sampling(body: dict[str, Any]) -> int | None:
    """Check the request's sampling fields (types, finiteness, ranges) and return the requested completion length
    (`max_completion_tokens`, else `max_tokens`; None when neither is given). Raises `WireError` (400, `param` set)."""
    for name, (low, high) in NUMBERS.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise WireError(f"`{name}` must be a finite number (got {str(value)[:40]!r})", param=name)
        _bounds(name, float(value), low, high)
    for name, (low, high) in INTEGERS.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise WireError(f"`{name}` must be an integer (got {str(value)[:40]!r})", param=name)
        _bounds(name, value, low, high)
    stop = body.get("stop")
    bad_stop = not isinstance(stop, list) or len(stop) > MAX_STOP or not all(isinstance(x, str) for x in stop)
    if stop is not None and not isinstance(stop, str) and bad_stop:
        raise WireError(f"`stop` must be a string or a list of at most {MAX_STOP} strings", param="stop")
    for name in ("stream", "logprobs"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise WireError(f"`{name}` must be true or false", param=name)
    for name, kind in (("stream_options", dict), ("tools", list), ("model", str), ("user", str)):
        if body.get(name) is not None and not isinstance(body[name], kind):
            raise WireError(f"`{name}` must be a{'n object' if kind is dict else ' ' + kind.__name__}", param=name)
    requested = body.get("max_completion_tokens")
    return requested if requested is not None else body.get("max_tokens")


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
        )
    return str(content)


def chat_messages(body: Any) -> list[dict[str, Any]]:
    """The request's `messages`, checked to be a non-empty list of objects with a role."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("`messages` must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise WireError(f"messages[{i}] must be an object with a `role`")
    return messages


def is_example(message: dict[str, Any]) -> bool:
    """A worked-example turn before the conversation (`name: example_user`, the OpenAI few-shot convention)."""
    name = message.get("name")
    return isinstance(name, str) and name.startswith(EXAMPLE_NAME_PREFIX)


def first_turn(messages: list[dict[str, Any]]) -> tuple[str | None, str]:
    """(system prompt or None, first user message): what routing and the conversation key are computed from, read
    as `trace_rl.messages` reads a conversation (so evaluation routes it on the same text). Worked-example turns are
    skipped: every conversation of a few-shot client shares them."""
    opening = [
        Message(
            role="system" if m["role"] == "developer" else m["role"],
            content=text_of(m.get("content")),
            example=is_example(m),
        )
        for m in messages
        if m["role"] in ("system", "developer", "user")
    ]
    first = first_user_text(opening)
    if first is None:
        raise WireError("the conversation has no user message to route on")
    return system_text(opening), first


def _tool_calls(raw: list[Any]) -> list[ToolCall]:
    calls = []
    for i, tc in enumerate(raw):
        fn = (tc or {}).get("function") or {}
        args, err = parse_arguments(fn.get("arguments"))
        raw_args = fn.get("arguments")
        calls.append(
            ToolCall(
                id=str(tc.get("id") or f"call_{i}"),
                name=str(fn.get("name") or ""),
                arguments=args,
                parse_error=err,
                raw=raw_args if isinstance(raw_args, str) else None,
            )
        )
    return calls


def messages_from_openai(messages: list[dict[str, Any]]) -> list[Message]:
    """trace-rl `Message`s from OpenAI wire messages (for the in-process backend)."""
    out = []
    for i, m in enumerate(messages):
        role = "system" if m["role"] == "developer" else m["role"]
        text = text_of(m.get("content"))
        try:
            if role == "assistant" and m.get("tool_calls"):
                calls = _tool_calls(m["tool_calls"])
                out.append(Message(role="assistant", tool_calls=calls, thought=text or None, example=is_example(m)))
            elif role == "tool":
                if not m.get("tool_call_id"):
                    raise WireError(f"messages[{i}]: a tool message needs `tool_call_id`")
                out.append(Message(role="tool", content=text, tool_call_id=str(m["tool_call_id"]), name=m.get("name")))
            elif role in ("system", "user", "assistant"):
                out.append(Message(role=role, content=text, example=is_example(m)))
            else:
                raise WireError(f"messages[{i}]: unknown role {m['role']!r}")
        except ValueError as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"messages[{i}]: {exc}") from None
    return out


def sampling_from_body(body: dict[str, Any], *, default_max_tokens: int) -> SamplingParams:
    """Sampling parameters of a request (OpenAI defaults: temperature 1, top_p 1), checked by `check_sampling`."""
    requested = check_sampling(body)
    if (body.get("n") or 1) != 1:
        raise WireError("n > 1 is not supported by the local backend", param="n")
    stop = body.get("stop")
    return SamplingParams(
        temperature=float(body["temperature"]) if body.get("temperature") is not None else 1.0,
        top_p=float(body["top_p"]) if body.get("top_p") is not None else 1.0,
        max_tokens=requested if requested is not None else default_max_tokens,
        seed=body.get("seed"),
        stop=[stop] if isinstance(stop, str) else (list(stop) if stop else None),
    )


def _wire_calls(message: Message) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in message.tool_calls or []
    ]


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion_json(resp: ModelResponse, *, model: str, completion_id: str | None = None) -> dict[str, Any]:
    """A `chat.completion` object for one generated turn."""
    msg = resp.message
    message: dict[str, Any] = {"role": "assistant", "content": msg.content if not msg.tool_calls else msg.thought}
    if msg.tool_calls:
        message["tool_calls"] = _wire_calls(msg)
    return {
        "id": completion_id or new_completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": resp.finish_reason or "stop", "logprobs": None}],
        "usage": {
            "prompt_tokens": resp.prompt_tokens,
            "completion_tokens": resp.completion_tokens,
            "total_tokens": resp.prompt_tokens + resp.completion_tokens,
        },
    }


def sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def stream_chunks(completion: dict[str, Any], *, include_usage: bool = False) -> list[bytes]:
    """A finished completion replayed as `chat.completion.chunk` SSE events: role, content, tool calls, finish."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        out.append(chunk({"content": message["content"]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": i, **call}]}))
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append(sse(head | {"choices": [], "usage": completion["usage"]}))
    out.append(sse("[DONE]"))
    return out


__all__ = [
    "WireError",
    "chat_messages",
    "check_sampling",
    "completion_json",
    "error_body",
    "first_turn",
    "is_example",
    "messages_from_openai",
    "new_completion_id",
    "sampling_from_body",
    "sse",
    "stream_chunks",
    "text_of",
]
