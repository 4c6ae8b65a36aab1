"""Shared-prefix vs unshared GRPO loss step: forward + backward time and FLOPs of one micro-batch, side by side.

One GRPO micro-batch of G groups x K rollouts (each group one prompt, completions of different lengths) goes through
`SharedPrefixGRPOTrainer._compute_loss` + `backward()` twice per repeat, once with TRL's own per-token log-prob method
(unshared) and once with the shared-prefix override, alternating, on the same trainer, model and LoRA. The first
pair is a warm-up and is not timed; the median of the rest is reported, with the relative difference of the LoRA
gradients between the two paths.

Prompt: `--prompt library:lookup_answer` tokenizes a real first prompt of that library family (system prompt, worked
examples, task opening) with the model's chat template, one seed per group; `--prompt-len N` uses N random token
ids per group instead. Completions: random token ids, lengths drawn uniformly from [--cmin, --cmax].

FLOPs (counted from the shapes each path executes, padding included): linear layers 2 * params * tokens forwarded,
LM head 2 * d * V * positions projected (TRL's fused head projects every position on CPU, only scored ones on CUDA),
attention 4 * layers * heads * head_dim * (sum over queries of the keys each attends to, causal); fwd+bwd = 3 x fwd
(the usual convention; with a frozen base the backward needs no weight gradients, so it is an upper bound).
`--fp32-reference` then recomputes TRL's gradients in fp32 to show how far bf16 rounding alone moves them (on CPU
with the 1,296-token library prompt this needs more than 15 GB of memory).

    .venv/bin/python benchmarks/shared_prefix_forward.py                                  # 750-token prompt, K=4
    .venv/bin/python benchmarks/shared_prefix_forward.py --prompt library:lookup_answer --groups 2 --out sp.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import types
from typing import Any

for _key, _value in (
    ("OMP_WAIT_POLICY", "PASSIVE"),
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("TRL_EXPERIMENTAL_SILENCE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)

import torch  # noqa: E402


def library_prompts(spec: str, tokenizer: Any, n: int) -> list[list[int]]:
    """The first prompt of `n` distinct seeds of a training environment, as the rollout tokenizes it."""
    from trace_rl.config.train import TrainConfig
    from trace_rl.engine.chat_codec import ChatCodec
    from trace_rl.engine.token_driver import initial_messages
    from trace_rl.training.selection import env_from_spec
    from trace_rl.training.trl_setup import limits_of

    env, limits, codec = env_from_spec(spec), limits_of(TrainConfig()), ChatCodec(tokenizer)
    prompts: list[list[int]] = []
    seed = 0
    while len(prompts) < n:
        messages = initial_messages(env, seed, limits)
        tools = env.agent_tools(env.make_env(env.make_task(seed))) if hasattr(env, "agent_tools") else None
        seed += 1
        if messages is not None:
            ids = codec.prompt_ids(messages, tools)
            if ids not in prompts:
                prompts.append(ids)
    return prompts


def make_batch(prompts: list[list[int]], k: int, cmin: int, cmax: int, pad: int, vocab: int, seed: int) -> dict:
    """G x K rows: prompts left-padded to the longest, completions right-padded; advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    rows = len(prompts) * k
    lengths = torch.randint(cmin, cmax + 1, (rows,), generator=g).tolist()
    width, comp = max(map(len, prompts)), max(lengths)
    prompt_ids = torch.full((rows, width), pad)
    prompt_mask = torch.zeros(rows, width, dtype=torch.long)
    completion_ids = torch.full((rows, comp), pad)
    completion_mask = torch.zeros(rows, comp, dtype=torch.long)
    for row, n in enumerate(lengths):
        p = torch.tensor(prompts[row // k])
        prompt_ids[row, width - len(p) :] = p
        prompt_mask[row, width - len(p) :] = 1
        completion_ids[row, :n] = torch.randint(0, vocab, (n,), generator=g)
        completion_mask[row, :n] = 1
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(rows, generator=g),
        "lengths": lengths,
    }


def linear_params(model: Any) -> int:
    """Weights of the decoder layers' linear maps (attention and MLP), LoRA included; embeddings and norms excluded."""
    return sum(p.numel() for n, p in model.named_parameters() if ".layers." in n and p.dim() == 2 and "norm" not in n)


def flops(cfg: Any, n_linear: int, batch: dict, *, shared: bool, cuda: bool) -> dict[str, float]:
    """Forward FLOPs of each part for the shapes the path executes, and fwd+bwd = 3 x their sum."""
    rows, width = batch["prompt_ids"].shape
    comp = batch["completion_ids"].size(1)
    scored = sum(batch["lengths"])
    heads = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    unique = len({tuple(r.tolist()) for r in batch["prompt_ids"]})
    if shared:
        head = width - 1
        tokens = unique * head + rows * (comp + 1)
        keys = unique * head * (head + 1) / 2 + rows * sum(head + j for j in range(1, comp + 2))
        projected = unique + (scored if cuda else rows * comp)
    else:
        total = width + comp
        tokens = rows * total
        keys = rows * total * (total + 1) / 2
        projected = scored if cuda else rows * (total - 1)
    parts = {
        "linear": 2.0 * n_linear * tokens,
        "lm_head": 2.0 * cfg.hidden_size * cfg.vocab_size * projected,
        "attention": 4.0 * cfg.num_hidden_layers * heads * keys,
    }
    return {"tokens_forwarded": tokens, **parts, "forward": sum(parts.values()), "fwd_bwd": 3 * sum(parts.values())}


def matmul_tflops(device: str, dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    """This machine's dense matmul throughput (TFLOP/s) in `dtype`: the floor a step's FLOPs are measured against."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def build_trainer(model_name: str, device: str, bf16: bool, out_dir: str) -> Any:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from trace_rl.config.train import TrainConfig
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.training.shared_prefix import trainer_class
    from trace_rl.training.trl_setup import lora_config

    path = resolve_model_path(model_name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if bf16 else torch.float32)
    if device == "cuda":
        model = model.to("cuda")
    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        use_cpu=device == "cpu",
        bf16=bf16,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        loss_type="grpo",
        max_completion_length=512,
    )

    def no_rollout(prompts: Any, trainer: Any) -> dict:
        raise AssertionError("the benchmark calls the loss directly")

    return trainer_class(True)(
        model=model,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": [{"role": "user", "content": "x"}]}]),
        processing_class=tokenizer,
        peft_config=lora_config(TrainConfig(), model),
        rollout_func=no_rollout,
    )


def step(trainer: Any, batch: dict, method: Any, device: str) -> tuple[float, dict[str, torch.Tensor]]:
    """Seconds for loss + backward with `method` as the per-token log-prob function, and the LoRA gradients."""
    trainer._get_per_token_logps_and_entropies = method
    trainer.model.zero_grad(set_to_none=True)
    inputs = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
    sync(device)
    start = time.perf_counter()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    sync(device)
    seconds = time.perf_counter() - start
    grads = {n: p.grad.detach().float().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return seconds, grads


def rel_diff(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """||got - ref|| / ||ref|| over all gradient tensors together."""
    num = torch.cat([(got[n] - ref[n]).flatten() for n in ref]).norm()
    return float(num / torch.cat([g.flatten() for g in ref.values()]).norm())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt", default=None, help="a training env spec (e.g. library:lookup_answer)")
    parser.add_argument("--prompt-len", type=int, default=750, help="random prompt length when --prompt is not given")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--cmin", type=int, default=100)
    parser.add_argument("--cmax", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="timed pairs after one warm-up pair")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fp32-reference",
        action="store_true",
        help="also compute TRL's unshared LoRA gradients in fp32 (after the timing) to size the bf16 rounding",
    )
    parser.add_argument("--out", default=None, help="also write the result as JSON here")
    a = parser.parse_args()

    from trl import GRPOTrainer

    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    bf16 = a.dtype == "bf16"
    trainer = build_trainer(a.model, device, bf16, tempfile.mkdtemp(prefix="sp-bench-"))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, read by the loss
    tok, cfg = trainer.processing_class, trainer.model.get_base_model().config
    g = torch.Generator().manual_seed(a.seed)
    if a.prompt:
        prompts = library_prompts(a.prompt, tok, a.groups)
    else:
        prompts = [torch.randint(0, cfg.vocab_size, (a.prompt_len,), generator=g).tolist() for _ in range(a.groups)]
    batch = make_batch(prompts, a.k, a.cmin, a.cmax, tok.pad_token_id, cfg.vocab_size, a.seed)

    methods = {
        "unshared": types.MethodType(GRPOTrainer._get_per_token_logps_and_entropies, trainer),
        "shared": trainer._get_per_token_logps_and_entropies,
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    grads: dict[str, dict[str, torch.Tensor]] = {}
    for i in range(a.repeats + 1):
        for name, method in methods.items():
            seconds, grads[name] = step(trainer, batch, method, device)
            if i:
                times[name].append(seconds)
    diff = rel_diff(grads["shared"], grads["unshared"])
    rounding = None
    if a.fp32_reference and bf16:
        trainer.model.float()
        trainer.accelerator.autocast = contextlib.nullcontext  # plain fp32, no bf16 autocast
        _, fp32 = step(trainer, batch, methods["unshared"], device)
        rounding = {name: rel_diff(grads[name], fp32) for name in methods}

    n_linear = linear_params(trainer.model)
    counted = {name: flops(cfg, n_linear, batch, shared=name == "shared", cuda=device == "cuda") for name in methods}
    floor = matmul_tflops(device, torch.bfloat16 if bf16 else torch.float32)
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "model": a.model,
        "device": device,
        "dtype": a.dtype,
        "threads": torch.get_num_threads(),
        "prompt": a.prompt or f"random {a.prompt_len} tokens",
        "prompt_lengths": [len(p) for p in prompts],
        "groups": a.groups,
        "k": a.k,
        "completion_lengths": batch["lengths"],
        "seconds": times,
        "median_seconds": median,
        "speedup": median["unshared"] / median["shared"],
        "flops": counted,
        "flop_ratio": counted["unshared"]["fwd_bwd"] / counted["shared"]["fwd_bwd"],
        "matmul_tflops": floor,
        "achieved_tflops": {n: counted[n]["fwd_bwd"] / median[n] / 1e12 for n in methods},
        "lora_grad_rel_diff": diff,
        "lora_grad_rel_diff_to_fp32_unshared": rounding,
        "shared_prefix_stats": trainer.shared_prefix_stats,
    }
    for name in methods:
        c = counted[name]
        print(
            f"{name:9s} median {median[name]:7.3f} s  (runs {', '.join(f'{t:.3f}' for t in times[name])})  "
            f"tokens {c['tokens_forwarded']:>6.0f}  fwd+bwd {c['fwd_bwd'] / 1e12:6.3f} TFLOP "
            f"(linear {c['linear'] / 1e9:.0f}, lm_head {c['lm_head'] / 1e9:.0f}, attention {c['attention'] / 1e9:.0f} "
            f"GFLOP fwd)  {result['achieved_tflops'][name]:.2f} TFLOP/s"
        )
    print(
        f"speedup {result['speedup']:.2f}x  FLOP ratio {result['flop_ratio']:.2f}x  matmul floor "
        f"{floor:.2f} TFLOP/s  LoRA grad rel diff {diff:.2e}  prompts {result['prompt_lengths']}  "
        f"completions {batch['lengths']}  device {device} {a.dtype} threads {result['threads']}"
    )
    if rounding:
        print(
            f"bf16 rounding: LoRA grads vs fp32 unshared: unshared {rounding['unshared']:.2e}, "
            f"shared {rounding['shared']:.2e}"
        )
    if a.out:
        from pathlib import Path

        from trace_rl.artifacts.store import atomic_write_json

        atomic_write_json(Path(a.out), result)


if __name__ == "__main__":
    main()
