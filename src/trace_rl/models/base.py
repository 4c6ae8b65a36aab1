"""The model-client protocol: async chat with tools, returning text or tool calls and, where available, token ids.

Every backend (OpenAI-compatible HTTP, local transformers + PEFT, scripted) implements `ModelClient`.
Failures that survive the client's retries raise
`trace_rl.errors.InfraError`; the rollout engine records them as infrastructure errors.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from trace_rl.types import Message


class SamplingParams(BaseModel):
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off (the full tempered distribution); transformers' own default of 50 is never applied
    max_tokens: int = 512
    seed: int | None = None
    stop: list[str] | None = None


class ModelResponse(BaseModel):
    """One assistant turn. `message.sampled` carries token ids when the backend gives them."""

    message: Message
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    latency_s: float = 0.0
    raw_text: str | None = Field(None, description="The decoded completion before tool-call parsing, if any.")


@runtime_checkable
class ModelClient(Protocol):
    """Anything that can answer a chat with tools."""

    name: str

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse: ...

    async def aclose(self) -> None: ...
