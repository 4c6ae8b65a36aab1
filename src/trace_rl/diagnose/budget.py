"""The LLM analyst's token budget: its context length, the reply it may need, and how prompt text is counted.

trace-rl's own fit of TRACE §3.2's analyst prompts to a model's context (the paper's code sends whole trajectories to a
long-context model and does not budget). The context comes from `diagnose.context_tokens` when set, else from the
client: a local model's `max_position_embeddings`, a vLLM server's `max_model_len`; else `DEFAULT_CONTEXT`. Text is
counted with the client's tokenizer when it has one (`LocalClient`, `VLLMClient`: `.tokenizer`), else estimated at
`CHARS_PER_TOKEN` characters per token (a conservative figure for English and JSON). The reply keeps
`min(max_tokens, context / 2)` tokens; the prompt gets the rest, less `PER_MESSAGE` tokens of chat-template overhead
per message.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.types import Message

CHARS_PER_TOKEN = 3.0
DEFAULT_CONTEXT = 32_768
PER_MESSAGE = 8


def _estimate(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass
class Budget:
    """Tokens of one analyst call: `context` in all, `completion` kept for the reply, `count` for prompt text."""

    context: int
    completion: int
    count: Callable[[str], int]
    how: str

    @property
    def prompt_room(self) -> int:
        """Tokens a prompt (all its messages) may take."""
        return self.context - self.completion

    def messages_tokens(self, messages: Sequence[Message]) -> int:
        return sum(self.count(m.text) + PER_MESSAGE for m in messages)

    def describe(self) -> str:
        return (
            f"its context of {self.context:,} tokens leaves {self.prompt_room:,} for the prompt after "
            f"{self.completion:,} kept for the reply ({self.how})"
        )

    def fit_chars(self, text: str, tokens: int) -> str:
        """The longest head of `text` that counts at most `tokens` (for showing a bad reply back to the model)."""
        if tokens <= 0:
            return ""
        if self.count(text) <= tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


def _tokenizer_counter(tokenizer: Any) -> Callable[[str], int] | None:
    encode = getattr(tokenizer, "encode", None)
    if not callable(encode):
        return None

    def count(text: str) -> int:
        return len(encode(text, add_special_tokens=False))

    return count


def _model_context(client: Any) -> int | None:
    """The context a client's model accepts, where the client can tell (no network call is made here)."""
    model = getattr(client, "model", None)
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(n, int) and n > 0:
        return n
    known = getattr(client, "max_model_len", None)
    return known if isinstance(known, int) and known > 0 else None


async def budget_for(client: Any, cfg: DiagnoseConfig) -> Budget:
    """The budget of `client` under `cfg` (a vLLM client is asked for its server's max_model_len once)."""
    context = cfg.context_tokens or _model_context(client)
    source = "configured context_tokens" if cfg.context_tokens else "the model's context"
    if context is None and callable(getattr(client, "context_length", None)):
        try:
            context = int(await asyncio.to_thread(client.context_length))
        except Exception:  # an unreachable server shows up at the first call, as one line
            context = None
    if context is None:
        context, source = DEFAULT_CONTEXT, f"default context {DEFAULT_CONTEXT:,}; set diagnose.context_tokens"
    counter = _tokenizer_counter(getattr(client, "tokenizer", None))
    how = f"{source}, counted with the model's tokenizer" if counter else f"{source}, ~{CHARS_PER_TOKEN:g} chars/token"
    completion = max(1, min(cfg.max_tokens, context // 2))
    return Budget(context=context, completion=completion, count=counter or _estimate, how=how)


__all__ = ["CHARS_PER_TOKEN", "DEFAULT_CONTEXT", "PER_MESSAGE", "Budget", "budget_for"]
