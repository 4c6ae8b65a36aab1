"""`VLLMSampler`: the `TurnSampler` of a vLLM server — token-id contexts in, token ids and log-probabilities out.

Each round's contexts go out as concurrent `/v1/completions` requests (the server batches them and reuses their shared
prefixes from its prefix cache); nothing is re-tokenized. `adapter` names the LoRA adapter to sample with (None: the
base model); every turn records the name the server answered with (`SampledTurn.version`), so a caller can check that
a batch came from one policy version. Failures are retried by the client (`VLLMClient.sample_ids`), restarting a
managed server that died.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from trace_rl.aio import run_sync
from trace_rl.engine.sampler import SampledTurn
from trace_rl.models.base import SamplingParams
from trace_rl.models.vllm_client import VLLMClient


class VLLMSampler:
    """Samples one assistant turn per context through `client`'s server, with `adapter` (None: the base model)."""

    def __init__(self, client: VLLMClient, *, adapter: str | None = None) -> None:
        self.client = client
        self.adapter = adapter
        self.stop_ids = set(client.stop_ids)

    def sample(
        self, contexts: Sequence[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0
    ) -> list[SampledTurn]:
        params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)

        async def all_turns() -> list[SampledTurn]:
            outs = await asyncio.gather(
                *(self.client.sample_ids(list(c), params, adapter=self.adapter) for c in contexts)
            )
            return [
                SampledTurn(
                    completion_ids=o.completion_ids,
                    logprobs=o.logprobs,
                    stopped=bool(o.completion_ids) and o.completion_ids[-1] in self.stop_ids,
                    version=o.model,
                )
                for o in outs
            ]

        return run_sync(all_turns()) if contexts else []


__all__ = ["VLLMSampler"]
