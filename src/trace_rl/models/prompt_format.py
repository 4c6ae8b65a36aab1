"""How trace-rl turns a conversation into a model's prompt tokens and a sampled completion back into a message.

One `PromptFormat` per model folder: its tokenizer (with the ChatML + tools template where it has none), what its chat
template renders (`probe_template`), the ids that end an assistant turn, and the two directions — `prompt_ids`
(messages and tools to the ids of the next assistant turn's prompt, tool calls inlined as the JSON lines the prompt
teaches when the template does not render `tool_calls`) and `parse` (sampled ids to a `Message`, tool calls parsed by
trace-rl, never by a server). Every backend that samples from token ids uses it — in process (`LocalClient`) and a
vLLM server's `/v1/completions` (`VLLMClient`) — so the two paths give the model the same prompt for the same
conversation, worked-example turns included, and read its answer the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_rl.models.chat_format import CHATML_TOOLS_TEMPLATE, TemplateCaps, probe_template, render_prompt
from trace_rl.models.toolcall_parse import parse_completion
from trace_rl.types import Message, SampledTokens


def stop_ids_of(tokenizer: Any, generation_eos: Any = None) -> set[int]:
    """The ids that end an assistant turn: eos, the model's generation eos (int or list), `<|im_end|>` if present."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if generation_eos is not None:
        ids.update(int(i) for i in (generation_eos if isinstance(generation_eos, list) else [generation_eos]))
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        ids.add(int(vocab["<|im_end|>"]))
    return ids


def generation_eos(model_path: Path) -> Any:
    """`eos_token_id` of the folder's generation config (None when it has none), read without loading weights."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_path).eos_token_id
    except (OSError, ValueError):
        return None


@dataclass
class ParsedTurn:
    """A sampled completion read back: the message (with its ids on `sampled`), the decoded text, and whether a stop
    id ended it."""

    message: Message
    raw_text: str
    stopped: bool

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.message.tool_calls else ("stop" if self.stopped else "length")


class PromptFormat:
    """The tokenizer-side half of a model: prompts as ids, completions as messages."""

    def __init__(self, model_path: Path | str, *, tokenizer: Any = None, generation_eos_id: Any = None) -> None:
        from transformers import AutoTokenizer

        self.model_path = Path(model_path)
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(self.model_path)
        if not getattr(self.tokenizer, "chat_template", None):
            self.tokenizer.chat_template = CHATML_TOOLS_TEMPLATE
        self.caps: TemplateCaps = probe_template(self.tokenizer)
        eos = generation_eos_id if generation_eos_id is not None else generation_eos(self.model_path)
        self.stop_ids = stop_ids_of(self.tokenizer, eos)
        pad = self.tokenizer.pad_token_id
        self.pad_id: int = int(pad) if pad is not None else min(self.stop_ids)

    def render_prompt(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text for the next assistant turn."""
        return render_prompt(self.tokenizer, messages, tools, self.caps)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of the prompt for the next assistant turn."""
        return list(self.tokenizer(self.render_prompt(messages, tools), add_special_tokens=False)["input_ids"])

    def token_id(self, text: str) -> int | None:
        """The id of `text` when it is exactly one token at the start of an assistant turn, else None."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return int(ids[0]) if len(ids) == 1 else None

    def parse(self, prompt: list[int], completion: list[int], logprobs: list[float] | None, *, turn: int) -> ParsedTurn:
        """The assistant message of a sampled completion (tool calls parsed from its text), ids kept on `sampled`."""
        stopped = bool(completion) and completion[-1] in self.stop_ids
        text_ids = completion[:-1] if stopped else completion
        raw_text = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        message = parse_completion(raw_text, id_prefix=f"call_{turn}")
        message.sampled = SampledTokens(prompt_ids=prompt, completion_ids=completion, logprobs=logprobs)
        return ParsedTurn(message=message, raw_text=raw_text, stopped=stopped)


__all__ = ["ParsedTurn", "PromptFormat", "generation_eos", "stop_ids_of"]
