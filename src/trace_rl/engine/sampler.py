"""Token-level samplers: given token-id contexts, sample one assistant turn each and return the ids as sampled.

This is the model-client seam of training. The episode loop never sends text to a sampler and never re-tokenizes what
comes back: `sample(contexts)` takes prompt ids and returns completion ids (plus their log-probabilities).

- `HFSampler`: in-process transformers `generate` on a batch of left-padded contexts — by default the trainer's own
  PEFT model, so rollouts are exactly on-policy (TRL syncs nothing: the adapter being trained is the one sampling).
- `VLLMSampler` (`vllm_sampler.py`): a vLLM server's `/v1/completions` with token-id prompts and `return_token_ids`,
  every context of a round in flight at once; in training the adapter being trained is loaded into the server under a
  versioned name after every optimizer step (`training/vllm_sync.py`), and each turn records that name (`version`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from trace_rl.models.prompt_format import stop_ids_of


@dataclass
class SampledTurn:
    """One sampled assistant turn: ids exactly as generated (ending with a stop id unless truncated)."""

    completion_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    stopped: bool = True
    version: str | None = None  # the policy version (served adapter name) that sampled it, where the sampler knows


class TurnSampler(Protocol):
    """Samples one assistant turn per context."""

    stop_ids: set[int]

    def sample(
        self, contexts: Sequence[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0
    ) -> list[SampledTurn]: ...


@contextmanager
def _as_is(model: Any) -> Iterator[Any]:
    yield model


class HFSampler:
    """Batched sampling with a transformers causal LM (optionally PEFT-wrapped).

    `model_context` yields the model to generate with (for the trainer: TRL's `unwrap_model_for_generation`); by
    default the given model is used as it is. Log-probabilities are those of the processed sampling distribution
    (temperature / top-p applied), for observability; TRL recomputes the old log-probs itself without vLLM.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_context: Callable[[], AbstractContextManager[Any]] | None = None,
        compute_logprobs: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.model_context = model_context or (lambda: _as_is(self.model))
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.stop_ids = stop_ids_of(tokenizer, gen_eos)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else min(self.stop_ids)
        self.compute_logprobs = compute_logprobs

    def sample(
        self, contexts: Sequence[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0
    ) -> list[SampledTurn]:
        import torch
        from transformers import GenerationConfig

        if not contexts:
            return []
        width = max(len(c) for c in contexts)
        ids = [[self.pad_id] * (width - len(c)) + list(c) for c in contexts]
        mask = [[0] * (width - len(c)) + [1] * len(c) for c in contexts]
        greedy = temperature <= 0
        gen_cfg = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None if greedy else top_p,
            top_k=None if greedy else 0,  # the full tempered distribution (None: transformers' default top-k 50)
            eos_token_id=sorted(self.stop_ids),
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_scores=self.compute_logprobs,
        )
        with self.model_context() as model, torch.no_grad():
            device = next(model.parameters()).device
            input_ids = torch.tensor(ids, dtype=torch.long, device=device)
            attention = torch.tensor(mask, dtype=torch.long, device=device)
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=gen_cfg)
        new = out.sequences[:, width:].tolist()
        logps = None
        if self.compute_logprobs and out.scores:
            steps = torch.stack([s.float() for s in out.scores], dim=1)  # (B, T, V)
            chosen = torch.tensor([row[: steps.size(1)] for row in new], device=steps.device).unsqueeze(-1)
            logps = torch.log_softmax(steps, dim=-1).gather(-1, chosen).squeeze(-1).tolist()
        turns: list[SampledTurn] = []
        for b, row in enumerate(new):
            cut = next((i + 1 for i, t in enumerate(row) if t in self.stop_ids), None)
            tokens = row[:cut] if cut is not None else row
            lp = [float(x) for x in logps[b][: len(tokens)]] if logps is not None else [0.0] * len(tokens)
            turns.append(SampledTurn(completion_ids=[int(t) for t in tokens], logprobs=lp, stopped=cut is not None))
        return turns
