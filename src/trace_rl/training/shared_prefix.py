"""Shared-prefix GRPO log-probs: the prompt of a group is forwarded once, with gradient, for all of its rollouts.

What it implements: the idea of Prefix Grouper (Liu et al., "Prefix Grouper: Efficient GRPO Training through
Shared-Prefix Forward", arXiv 2506.05433) and of shared-prefix GRPO generally. The K rollouts of a group share their
prompt (system prompt, worked examples, the task's opening), so causal self-attention splits into the prefix's own
attention, computed once per distinct prompt, and each completion's attention over [prefix, completion]. Gradients
reach the prefix through every completion that reads it, so training is the same computation, not an approximation.

How: `SharedPrefixGRPOTrainer` overrides TRL 1.16.0's `GRPOTrainer._get_per_token_logps_and_entropies` (used for the
loss and for old/reference log-probs). Rows of a micro-batch whose left-padded prompt ids and prompt mask are equal
share a prefix. Each distinct prompt, minus its last token, is forwarded once with a KV cache, keeping the graph; the
cache is gathered to the rows (an index_select, whose backward sums the rows' gradients into the one prefix); then
the last prompt token and the completion are forwarded over that cache through TRL's fused LM head, which gives the
log-prob (and entropy) of every completion token, the first one included (it is predicted at the prompt's last
position). Positions, attention mask and padding are those of TRL's unshared path (positions count the left pads, the
mask spans prompt + completion), so both computations agree to float rounding (tested to 1e-5 in fp32).

Where it departs from Prefix Grouper: no custom attention; it reuses the model's own KV-cache path, so any Hugging Face
decoder whose cache is made of plain `DynamicLayer`s works unchanged, at the price of one copy of the prefix K/V per
row (memory, not FLOPs). It falls back to TRL's unshared computation, with one log line per reason, for what it
cannot share: multimodal or token-type inputs, the MoE aux loss, gradient checkpointing (transformers drops the cache
inside checkpointed layers), a model wrapped for distributed training, any other cache layer (sliding window, linear
attention), prompts of one token; and quietly for a micro-batch in which no two rows share a prompt. Where it departs
from TRL: the generation batch is shuffled by group, not by row, before it is cut into micro-batches, so that a
group's rows land in one micro-batch (see `SharedPrefixGRPOTrainer`).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import (
    shuffle_sequence_dict,
    split_pixel_values_by_grid,
    split_tensor_dict,
    unsplit_pixel_values_by_grid,
)

log = logging.getLogger(__name__)


def prefix_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the first row of each distinct prompt, each row's index into those): rows share a prefix when their
    left-padded prompt ids and prompt mask are equal."""
    key = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = torch.arange(inverse.numel(), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), inverse.numel(), dtype=rows.dtype, device=rows.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    return first, inverse


def group_order(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
    """A random order of the rows that keeps the rows of one prompt together: prompts in random order, and rows in
    random order within each prompt (from torch's global generator, as TRL's own shuffle)."""
    _, inverse = prefix_groups(prompt_ids.cpu(), prompt_mask.cpu())
    n_rows = inverse.numel()
    rank = torch.randperm(int(inverse.max()) + 1)[inverse]
    return torch.argsort(rank * n_rows + torch.randperm(n_rows))


def permute_rows(batch: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
    """Every per-row value of a generation batch in `order` (0-d tensors and None kept), as TRL's shuffle does."""

    def permute(value: Any) -> Any:
        if value is None or (isinstance(value, torch.Tensor) and value.ndim == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[order]
        return [value[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}


def base_model_of(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (the model itself otherwise)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def cache_kwarg(model: Any) -> str:
    """The name the model's forward takes its KV cache under: `cache` (transformers >= 5.24) or `past_key_values`."""
    params = inspect.signature(type(base_model_of(model)).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def returned_cache(outputs: Any) -> Any:
    cache = getattr(outputs, "cache", None)
    return getattr(outputs, "past_key_values", None) if cache is None else cache


def cache_is_shareable(cache: Any) -> bool:
    """True for a cache whose every layer is a plain `DynamicLayer` (full attention, K/V concatenated per token)."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def unshared_reason(model: Any, prompt_len: int, *, compute_aux_loss: bool, extra: dict[str, Any]) -> str | None:
    """Why this call cannot share its prefix, or None when it can (the checks that need no forward)."""
    given = sorted(name for name, value in extra.items() if value is not None)
    if given:
        return f"inputs other than text ({', '.join(given)})"
    if compute_aux_loss:
        return "the MoE load-balancing loss is requested"
    if prompt_len < 2:
        return "the prompt has fewer than 2 tokens"
    if getattr(base_model_of(model), "is_gradient_checkpointing", False):
        return "gradient checkpointing is on (checkpointed layers drop the KV cache)"
    return None


def shared_prefix_logps(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> tuple[torch.Tensor, torch.Tensor | None, int] | None:
    """Per-token log-probs and entropies of the last `logits_to_keep` tokens of each row, as TRL's unshared path
    computes them, with each distinct prompt forwarded once; and the number of distinct prompts. None when the model's
    cache cannot be shared (nothing is returned from the prefix forward, or a layer is not a `DynamicLayer`).

    `model` must carry TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`), as GRPOTrainer installs it.
    """
    prompt_len = input_ids.size(1) - logits_to_keep
    prompt_ids, prompt_mask = input_ids[:, :prompt_len], attention_mask[:, :prompt_len]
    first, inverse = prefix_groups(prompt_ids, prompt_mask)
    head = prompt_len - 1  # the prefix forward covers all but the last prompt token
    prefix = model(
        input_ids=prompt_ids[first, :head], attention_mask=prompt_mask[first, :head], use_cache=True, logits_to_keep=1
    )
    cache = returned_cache(prefix)
    if cache is None or not cache_is_shareable(cache):
        return None
    cache.batch_select_indices(inverse)  # one view of the prefix K/V per row; gradients sum back into the prefix

    # The tail: the last prompt token (whose position predicts the first completion token) and the completion. The
    # fused head scores labels[:, 1:] from positions [:-1], so the tail's first label (a prompt token) is never used.
    tail_ids = input_ids[:, head:]
    labels = tail_ids.masked_fill(attention_mask[:, head:] == 0, -100)
    outputs = model(
        input_ids=tail_ids,
        attention_mask=attention_mask,
        labels=labels,
        fused_lm_head=True,
        **{cache_kwarg(model): cache},
    )
    return outputs.log_probs, outputs.entropy, int(first.numel())


class SharedPrefixGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer computing each distinct prompt's forward once per micro-batch (see the module docstring).

    Micro-batches hold whole groups: the generation batch is shuffled by group (`group_order`) instead of by row
    before TRL splits it into gradient-accumulation micro-batches, so with `per_device_train_batch_size` a multiple of
    K each prompt is forwarded once per step. (TRL's row shuffle would scatter a group's rows over the micro-batches.)
    This does not change the step's gradient for the per-sequence or global-token losses (`grpo`, `dr_grpo`, `dapo`,
    `cispo`); for `bnpo`, which normalises per micro-batch, it changes which rows are normalised together.

    `shared_prefix_stats` counts the micro-batches computed each way, the rows and distinct prompts of the shared ones,
    and the prompt tokens not forwarded again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.shared_prefix_stats = {"shared": 0, "unshared": 0, "rows": 0, "prompts": 0, "prefix_tokens_skipped": 0}
        self._shared_prefix_notes: set[str] = set()
        self._cache_unshareable = False
        super().__init__(*args, **kwargs)

    def _note_unshared(self, reason: str) -> None:
        if reason not in self._shared_prefix_notes:
            self._shared_prefix_notes.add(reason)
            log.warning("shared prefix: computing log-probs unshared (TRL's path) because %s", reason)

    def _prepare_inputs(self, generation_batch: dict[str, Any]) -> dict[str, Any]:
        """TRL's training branch of `_prepare_inputs` with the row shuffle replaced by a group-keeping one."""
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            if "pixel_values" in batch or "prompt_ids" not in batch:
                batch = shuffle_sequence_dict(batch)
            else:
                batch = permute_rows(batch, group_order(batch["prompt_ids"], batch["prompt_mask"]))
            batches = split_tensor_dict(batch, self.args.steps_per_generation)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(b) for b in batches]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **extra: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        def unshared(ids: torch.Tensor, mask: torch.Tensor, size: int | None) -> tuple[Any, Any, Any]:
            self.shared_prefix_stats["unshared"] += 1
            return super(SharedPrefixGRPOTrainer, self)._get_per_token_logps_and_entropies(
                model,
                ids,
                mask,
                logits_to_keep,
                batch_size=size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **extra,
            )

        reason = unshared_reason(
            model, input_ids.size(1) - logits_to_keep, compute_aux_loss=compute_aux_loss, extra=extra
        )
        if reason is None and self.accelerator.unwrap_model(model) is not model:
            reason = f"the model is wrapped ({type(model).__name__}) for distributed training"
        if reason is None and self._cache_unshareable:
            reason = "the model's KV cache is not made of plain DynamicLayers"
        if reason is not None:
            self._note_unshared(reason)
            return unshared(input_ids, attention_mask, batch_size)

        size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), size):
            ids, mask = input_ids[start : start + size], attention_mask[start : start + size]
            logps, entropies = self._chunk(model, ids, mask, logits_to_keep, unshared)
            all_logps.append(logps)
            all_entropies.append(entropies)
        logps = torch.cat(all_logps, dim=0)
        return logps, (torch.cat(all_entropies, dim=0) if compute_entropy else None), None

    def _chunk(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, logits_to_keep: int, unshared: Any) -> Any:
        """(log-probs, entropies) of one micro-batch chunk, shared when at least two rows share a prompt."""
        prompt_len = ids.size(1) - logits_to_keep
        first, _ = prefix_groups(ids[:, :prompt_len], mask[:, :prompt_len])
        if first.numel() == ids.size(0):  # nothing to share in this chunk
            logps, entropies, _ = unshared(ids, mask, None)
            return logps, entropies
        with self.accelerator.autocast():
            result = shared_prefix_logps(model, ids, mask, logits_to_keep)
        if result is None:
            self._cache_unshareable = True
            self._note_unshared("the model's KV cache is not made of plain DynamicLayers")
            logps, entropies, _ = unshared(ids, mask, None)
            return logps, entropies
        logps, entropies, n_unique = result
        self.shared_prefix_stats["shared"] += 1
        self.shared_prefix_stats["rows"] += ids.size(0)
        self.shared_prefix_stats["prompts"] += n_unique
        self.shared_prefix_stats["prefix_tokens_skipped"] += (ids.size(0) - n_unique) * (prompt_len - 1)
        return logps, entropies


def trainer_class(shared_prefix: bool) -> type:
    """The GRPO trainer class for `train.shared_prefix`: `SharedPrefixGRPOTrainer` when on, TRL's `GRPOTrainer` when
    off."""
    return SharedPrefixGRPOTrainer if shared_prefix else GRPOTrainer


__all__ = [
    "SharedPrefixGRPOTrainer",
    "cache_is_shareable",
    "group_order",
    "permute_rows",
    "prefix_groups",
    "shared_prefix_logps",
    "trainer_class",
    "unshared_reason",
]
