"""Run by `test_grouped_lora.py` in the vLLM environment's python: trace-rl's grouped LoRA ops against vLLM's own
torch ops on the same random inputs (decode and prefill, one adapter and several, "no adapter" rows, fp32 and bf16);
prints one JSON line of the largest differences and what `register()` patched."""

import json
import os
import sys

import torch
import trace_rl_grouped_lora as grouped
from vllm.lora.ops import torch_ops as vllm_ops
from vllm.lora.punica_wrapper import punica_cpu

SLOTS, RANK, HIDDEN, OUT = 4, 16, 96, 160


def weights(dtype, *, four_d, rank_first):
    shape = (SLOTS, RANK, HIDDEN) if rank_first else (SLOTS, OUT, RANK)
    w = torch.randn(*shape, dtype=dtype)
    w[-1] = 0  # vLLM keeps a free slot zero; -1 ("no adapter") reads it
    return w.unsqueeze(1) if four_d else w


def compare(dtype):
    worst = {}

    def note(name, a, b):
        scale = b.abs().max().clamp_min(1e-6)
        worst[name] = max(worst.get(name, 0.0), float((a - b).abs().max() / scale))

    for indices in ([0] * 7, [0, 2, -1, 0, 1, 2, -1], [-1] * 7, [1]):
        idx = torch.tensor(indices)
        tokens = len(indices)
        # prefill metadata: sequences of lengths 3, 1, 2, ... with their adapter indices
        lens = torch.tensor([3, 1, 2, 4][: max(1, min(4, tokens))])
        seq_idx = idx[: lens.numel()]
        n_prefill = int(lens.sum())
        meta = (torch.cumsum(lens, 0) - lens, lens, seq_idx, lens.numel(), int(lens.max()), n_prefill)
        for four_d in (False, True):
            a = weights(dtype, four_d=four_d, rank_first=True)
            b = weights(dtype, four_d=four_d, rank_first=False)
            for n, args in ((tokens, (idx,)), (n_prefill, None)):
                x = torch.randn(n, HIDDEN, dtype=dtype)
                h = torch.randn(n, RANK, dtype=torch.float32)
                base = torch.randn(n, OUT + 8, dtype=dtype)
                if args is not None:  # decode: one index per token
                    calls = [
                        ("bgmv_shrink", (x, a), torch.zeros(n, RANK, dtype=torch.float32), (idx, 0.5)),
                        ("bgmv_expand", (h, b), base.clone(), (idx, True)),
                        ("bgmv_expand", (h, b), base.clone(), (idx, False)),
                        ("bgmv_expand_slice", (h, b), base.clone(), (idx, 4, OUT, True)),
                        ("bgmv_expand_slice", (h, b), base.clone(), (idx, 4, OUT, False)),
                    ]
                else:  # prefill: one index per sequence, positional metadata as punica_cpu passes it
                    calls = [
                        ("sgmv_shrink", (x, a), torch.zeros(n, RANK, dtype=torch.float32), (*meta, 0.5)),
                        ("sgmv_expand", (h, b), base.clone(), (*meta, True)),
                        ("sgmv_expand", (h, b), base.clone(), (*meta, False)),
                        ("sgmv_expand_slice", (h, b), base.clone(), (*meta, 4, OUT, True)),
                        ("sgmv_expand_slice", (h, b), base.clone(), (*meta, 4, OUT, False)),
                    ]
                for name, (inp, w), out, rest in calls:
                    if args is not None and len(indices) != n:
                        continue
                    mine, theirs = out.clone(), out.clone()
                    getattr(grouped, name)(inp, w, mine, *rest)
                    getattr(vllm_ops, name)(inp, w, theirs, *rest)
                    note(name, mine.float(), theirs.float())
    return worst


torch.manual_seed(0)
result = {"fp32": compare(torch.float32), "bf16": compare(torch.bfloat16)}
os.environ.pop(grouped.ENV, None)
grouped.register()
result["patched_without_env"] = [n for n in grouped.OPS if getattr(punica_cpu, n) is getattr(grouped, n)]
os.environ[grouped.ENV] = "1"
grouped.register()
result["patched_with_env"] = [n for n in grouped.OPS if getattr(punica_cpu, n) is getattr(grouped, n)]
json.dump(result, sys.stdout)
