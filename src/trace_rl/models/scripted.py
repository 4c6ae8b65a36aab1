"""The `scripted` model kind: `ScriptedClient` plays back a script instead of calling a model.

A model kind like the others (`kind: scripted` with a `script:` list under a config's `models`, built by
`registry.build_client`), for dry runs that need no model; tests also build it directly, with a callable script or
fake token ids.

A script item is a string (parsed like a completion, so `<tool_call>` tags become tool calls), a dict
(`{"content": ...}`, `{"tool_calls": [{"name", "arguments"}], "thought": ...}`), a `Message`, or a callable
`(messages, tools) -> str | dict | Message` used once. A callable given instead of a list answers every call. The client
records every call it receives, and can fake token ids (a stable hash per word piece, or a real tokenizer) so code that
needs `Message.sampled` can be tested without a model.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.models.toolcall_parse import parse_arguments, parse_completion, render_message_text
from trace_rl.types import Message, SampledTokens, ToolCall

ScriptFn = Callable[[list[Message], list[dict[str, Any]] | None], str | dict[str, Any] | Message]
ScriptItem = str | dict[str, Any] | Message | ScriptFn

_PIECES = re.compile(r"\w+|[^\w\s]|\s+")
FAKE_VOCAB = 50_000
FAKE_EOS = 2


class ScriptExhaustedError(RuntimeError):
    """The script has no response left and `on_exhausted="raise"`."""


def fake_token_ids(text: str, vocab_size: int = FAKE_VOCAB) -> list[int]:
    """A stable fake tokenization: one id per word, punctuation mark or whitespace run (ids 3..vocab_size-1)."""
    return [3 + int(hashlib.sha1(p.encode()).hexdigest()[:8], 16) % (vocab_size - 3) for p in _PIECES.findall(text)]


@dataclass
class ScriptedCall:
    """One call the client received."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    adapter: str | None
    sampling: SamplingParams | None


def _from_dict(item: dict[str, Any], prefix: str) -> Message:
    if item.get("tool_calls"):
        calls = []
        for i, c in enumerate(item["tool_calls"]):
            fn = c.get("function", c)
            args, err = parse_arguments(fn.get("arguments", fn.get("parameters")))
            raw = fn.get("arguments") if err else None
            calls.append(
                ToolCall(id=c.get("id") or f"{prefix}_{i}", name=fn["name"], arguments=args, parse_error=err, raw=raw)
            )
        return Message(role="assistant", tool_calls=calls, thought=item.get("thought") or item.get("content") or None)
    return Message(role="assistant", content=item.get("content", ""))


class ScriptedClient:
    """The `scripted` kind's `ModelClient`: answers from a script; `calls` records what it was asked."""

    def __init__(
        self,
        script: Sequence[ScriptItem] | ScriptFn,
        *,
        name: str = "scripted",
        on_exhausted: Literal["raise", "repeat_last", "text"] = "raise",
        exhausted_text: str = "",
        fake_tokens: bool = False,
        tokenizer: Any | None = None,
        vocab_size: int = FAKE_VOCAB,
    ) -> None:
        """`tokenizer` (a Hugging Face tokenizer with a chat template) gives real ids; `fake_tokens` hashed ones."""
        self.name = name
        self._fn: ScriptFn | None = script if callable(script) else None
        self.script: list[ScriptItem] = [] if callable(script) else list(script)
        self.on_exhausted = on_exhausted
        self.exhausted_text = exhausted_text
        self.fake_tokens = fake_tokens or tokenizer is not None
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.calls: list[ScriptedCall] = []
        self._position = 0
        self._last: Message | None = None
        self._caps: Any = None

    @property
    def remaining(self) -> int:
        """Responses left in the script (0 for a callable script)."""
        return len(self.script) - self._position

    def _next_item(self) -> ScriptItem:
        if self._fn is not None:
            return self._fn
        if self._position < len(self.script):
            item = self.script[self._position]
            self._position += 1
            return item
        if self.on_exhausted == "text":
            return self.exhausted_text
        if self.on_exhausted == "repeat_last" and self._last is not None:
            return self._last
        raise ScriptExhaustedError(f"scripted model '{self.name}' ran out of responses after {len(self.script)}")

    def _to_message(self, item: Any, messages: list[Message], tools: list[dict[str, Any]] | None) -> Message:
        prefix = f"call_{len(messages)}"
        if isinstance(item, Message):
            return item.model_copy(deep=True)
        if callable(item):
            return self._to_message(item(messages, tools), messages, tools)
        if isinstance(item, dict):
            return _from_dict(item, prefix)
        if isinstance(item, str):
            return parse_completion(item, id_prefix=prefix)
        raise TypeError(f"script item must be str, dict, Message or callable, not {type(item).__name__}")

    def _tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None, text: str) -> SampledTokens:
        if self.tokenizer is not None:
            from trace_rl.models.chat_format import probe_template, render_prompt

            if self._caps is None:
                self._caps = probe_template(self.tokenizer)
            prompt_text = render_prompt(self.tokenizer, messages, tools, self._caps)
            prompt = list(self.tokenizer(prompt_text, add_special_tokens=False)["input_ids"])
            completion = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            eos = self.tokenizer.eos_token_id
            completion += [eos] if eos is not None else []
        else:
            prompt_text = "\n".join(f"{m.role}: {render_message_text(m)}" for m in messages)
            prompt = fake_token_ids(prompt_text, self.vocab_size)
            completion = [*fake_token_ids(text, self.vocab_size), FAKE_EOS]
        return SampledTokens(prompt_ids=prompt, completion_ids=completion, logprobs=[0.0] * len(completion))

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        self.calls.append(ScriptedCall([m.model_copy(deep=True) for m in messages], tools, adapter, sampling))
        message = self._to_message(self._next_item(), messages, tools)
        message.sampled = None
        self._last = message.model_copy(deep=True)
        text = render_message_text(message)
        prompt_tokens = completion_tokens = 0
        if self.fake_tokens:
            message.sampled = self._tokens(messages, tools, text)
            prompt_tokens = len(message.sampled.prompt_ids or [])
            completion_tokens = len(message.sampled.completion_ids)
        return ModelResponse(
            message=message,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            latency_s=time.perf_counter() - started,
            raw_text=text,
        )

    async def aclose(self) -> None:
        """Nothing to release."""
