"""Chat-template rendering and delta tokenization for the token driver (`token_driver.py`).

`ChatCodec.bridge_ids` gives the ids to append after a sampled assistant turn: the *delta* of the chat template, i.e.
the text `render(history + new, add_generation_prompt=True)` adds after `render(history)`, preceded by whatever the
template puts after an assistant message's end-of-turn token (`"\\n"` in ChatML). `check_prefix_preserving` runs at
start-up: a template that rewrites earlier turns (e.g. Qwen3 dropping past `<think>`) is refused with a clear error
instead of silently training on drifted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trace_rl.errors import UserError
from trace_rl.models.chat_format import (
    TemplateCaps,
    add_tool_listing,
    normalize_tools,
    probe_template,
    to_template_messages,
)
from trace_rl.types import Message, ToolCall


class PrefixError(UserError):
    """The chat template is not prefix-preserving, so appending token deltas would drift from the rendered text."""


class ChatCodec:
    """Chat-template rendering and delta tokenization for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.caps: TemplateCaps = probe_template(tokenizer)
        self.assistant_tail = self._assistant_tail()

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, *, generation: bool) -> str:
        tmsgs = to_template_messages(messages, inline_tool_calls=not self.caps.renders_tool_calls)
        norm = normalize_tools(tools)
        if norm and not self.caps.renders_tools:
            tmsgs, norm = add_tool_listing(tmsgs, norm), None
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": generation}
        if norm:
            kwargs["tools"] = norm
        return self.tokenizer.apply_chat_template(tmsgs, **kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(messages, tools, generation=True))

    def _assistant_tail(self) -> str:
        """What the template writes after an assistant message's content (`<|im_end|>\\n` in ChatML)."""
        marker = "zq7 marker"
        convo = [Message(role="system", content="s"), Message(role="user", content="u")]
        text = self.render([*convo, Message(role="assistant", content=marker)], None, generation=False)
        at = text.rfind(marker)
        if at < 0:
            raise PrefixError("the chat template does not render assistant messages")
        return text[at + len(marker) :]

    def bridge_ids(
        self,
        history: list[Message],
        new: list[Message],
        tools: list[dict[str, Any]] | None,
        *,
        stop_text: str | None,
    ) -> list[int]:
        """Ids to append after a sampled assistant turn so that the context continues as the template would.

        `history` ends with that assistant message; `new` holds what followed it (tool results, user turns);
        `stop_text` is the decoded stop token the turn ended with (None when it was truncated).
        """
        prev = self.render(history, tools, generation=False)
        full = self.render(history + new, tools, generation=True)
        if not full.startswith(prev):
            raise PrefixError(
                "chat template is not prefix-preserving: rendering more messages changed earlier text "
                "(use a training template that keeps past turns as they were)"
            )
        tail = self.assistant_tail
        lead = tail[len(stop_text) :] if stop_text and tail.startswith(stop_text) else tail
        return self.encode(lead + full[len(prev) :])


def check_prefix_preserving(codec: ChatCodec, tools: list[dict[str, Any]] | None = None) -> None:
    """Start-up check: every rendering of a probe conversation extends the previous one, at the text level."""
    call = ToolCall(id="c0", name="probe_tool", arguments={"x": 1})
    convo = [
        Message(role="system", content="probe system"),
        Message(role="assistant", content="hello"),
        Message(role="user", content="probe question"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", content="probe result", tool_call_id="c0", name="probe_tool"),
        Message(role="assistant", content="probe answer"),
        Message(role="user", content="thanks"),
    ]
    previous = ""
    for k in range(2, len(convo) + 1):
        head = convo[:k]
        closed = codec.render(head, tools, generation=False)
        if not closed.startswith(previous):
            raise PrefixError(
                f"chat template is not prefix-preserving at message {k} ({head[-1].role}); token-in/token-out "
                "training needs one that renders past turns unchanged"
            )
        if head[-1].role != "assistant":
            previous = codec.render(head, tools, generation=True)
            after = codec.render([*head, Message(role="assistant", content="x")], tools, generation=False)
            if not after.startswith(previous):
                raise PrefixError("chat template: the generation prompt is not a prefix of the assistant turn")
        else:
            previous = closed
            if not closed.endswith(codec.assistant_tail):
                raise PrefixError("chat template: assistant messages do not end the same way")
