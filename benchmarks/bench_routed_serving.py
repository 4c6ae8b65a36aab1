"""What serving several LoRA adapters at once costs: library episodes per minute through one vLLM server when every
episode goes to the base model, to one adapter, or is routed by task to two or three served names (the TRACE arm's
traffic), side by side in one invocation.

The adapters are PEFT LoRAs with B = 0 (PEFT's default initialisation): they compute what the base model computes (up
to rounding in batches composed differently), so every arm samples nearly the same episodes for the same seeds, and
what differs is the server's work for the adapters. Routing is a fixed function of the task (a hash of its first user
message modulo the arm's names), so no router model runs. One managed server (`models/managed_server.py`) serves
every arm; its start is not counted. `--repeat N` plays the arms N times in the same order. Reported per arm: wall
seconds, episodes per minute, completion and prompt tokens, successes, and the ratio to the base arm's wall time (the
fastest run of each). The first arm also warms the server's prefix cache for the base model; an adapter's requests
have their own cache entries.

    .venv/bin/python benchmarks/bench_routed_serving.py --tasks 48 --out runs/bench-routed-serving
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

for _key, _value in (("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_key, _value)

from trace_rl.artifacts.store import JsonlStore, atomic_write_json  # noqa: E402
from trace_rl.config import TraceConfig  # noqa: E402
from trace_rl.config.train import TrainConfig  # noqa: E402
from trace_rl.engine.episode import EpisodeLimits  # noqa: E402
from trace_rl.engine.plan import plan_jobs  # noqa: E402
from trace_rl.engine.runner import run_rollout  # noqa: E402
from trace_rl.envs.registry import load_domain  # noqa: E402
from trace_rl.evaluate.episodes import RoutedClient, RoutedEpisodeFactory  # noqa: E402
from trace_rl.models.base import SamplingParams  # noqa: E402
from trace_rl.models.registry import build_clients  # noqa: E402
from trace_rl.models.resolve import resolve_model_path  # noqa: E402
from trace_rl.routing.router import ScriptedRouter  # noqa: E402

ARMS: dict[str, list[str]] = {
    "base": ["base"],
    "one adapter": ["a"],
    "two adapters": ["a", "b"],
    "two adapters + base": ["a", "b", "base"],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", type=int, default=48, help="library test tasks (the first N)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=24)
    p.add_argument("--prompt", default="library-agent-v5")
    p.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--repeat", type=int, default=1, help="play every arm this many times, in the same order each time")
    p.add_argument("--out", type=Path, default=Path("runs/bench-routed-serving"))
    return p.parse_args(argv)


def zero_adapter(model: Path, folder: Path, seed: int) -> Path:
    """A PEFT LoRA of the trainer's default shape (`TrainConfig`: rank, alpha, target modules) whose B is 0: the base
    model's function."""
    if (folder / "adapter_config.json").exists():
        return folder
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    shape = TrainConfig()
    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16)
    lora = LoraConfig(r=shape.lora_r, lora_alpha=shape.lora_alpha, target_modules=shape.lora_targets)
    peft = get_peft_model(base, lora)
    peft.save_pretrained(folder)
    return folder


def config(args: argparse.Namespace) -> TraceConfig:
    return TraceConfig.model_validate(
        {
            "run": {"name": "bench-routed-serving", "runs_dir": str(args.out)},
            "models": {
                "policy": {
                    "kind": "vllm",
                    "model": args.model,
                    "temperature": args.temperature,
                    "max_tokens": args.max_tokens,
                    "device": "cpu",
                    "concurrency": args.concurrency,
                }
            },
            "env": {
                "name": "library",
                "options": {"n_test": args.tasks, "prompt": args.prompt},
                "max_steps": args.max_steps,
                "max_errors": 3,
            },
        }
    )


async def play(args: argparse.Namespace, cfg: TraceConfig) -> dict[str, Any]:
    domain = load_domain("library", cfg.env)
    tasks = domain.tasks("test")[: args.tasks]
    clients = build_clients(cfg, ["policy"])
    client = clients["policy"]
    model = resolve_model_path(args.model)
    for name, seed in (("a", 1), ("b", 2)):
        client.load_adapter(name, zero_adapter(model, args.out / "adapters" / name, seed))
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens)
    limits = EpisodeLimits(max_steps=args.max_steps, max_errors=3)
    results: dict[str, Any] = {}
    try:
        for repeat in range(args.repeat):
            for arm in args.arms:
                names = ARMS[arm]

                def route(first: str, system: str | None, names: list[str] = names) -> str:
                    return names[int(hashlib.sha1(first.encode()).hexdigest(), 16) % len(names)]

                routed = RoutedClient(client, ScriptedRouter(route))
                factory = RoutedEpisodeFactory(
                    domain=domain,
                    env_name="library",
                    split="test",
                    client=routed,
                    model_name="policy",
                    sampling=sampling,
                    limits=limits,
                    routed=routed,
                )
                store = JsonlStore(args.out / f"{arm.replace(' ', '_').replace('+', 'plus')}-{repeat}.jsonl")
                store.path.unlink(missing_ok=True)
                jobs = plan_jobs("library", "test", tasks, 1, 0)
                started = time.perf_counter()
                await run_rollout(jobs, factory, store, concurrency=args.concurrency, label=arm)
                wall = time.perf_counter() - started
                records = list(store.latest().values())
                row = {
                    "episodes": len(records),
                    "wall_s": round(wall, 1),
                    "episodes_per_min": round(60 * len(records) / wall, 2),
                    "completion_tokens": sum(r.get("tokens", {}).get("completion", 0) for r in records),
                    "prompt_tokens": sum(r.get("tokens", {}).get("prompt", 0) for r in records),
                    "success": sum(1 for r in records if (r.get("reward") or 0) >= 1.0),
                    "routes": sorted({str(r.get("adapter")) for r in records}),
                    "route_calls": routed.route_calls,
                }
                results.setdefault(arm, []).append(row)
                print(f"{arm:22s} run {repeat}: {json.dumps(row)}", flush=True)
    finally:
        await clients.aclose()
    return results


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    base = min(r["wall_s"] for r in results.get("base", [{"wall_s": float("nan")}]))
    lines = [
        "| arm | episodes | wall s (min of runs) | episodes/min | completion tokens | successes | × base wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, rows in results.items():
        best = min(rows, key=lambda r: r["wall_s"])
        lines.append(
            f"| {arm} | {best['episodes']} | {best['wall_s']} | {best['episodes_per_min']} | "
            f"{best['completion_tokens']} | {best['success']} | {best['wall_s'] / base:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = config(args)
    settings = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        **{k: str(v) for k, v in vars(args).items()},
        "python": platform.python_version(),
    }
    results = asyncio.run(play(args, cfg))
    atomic_write_json(args.out / "results.json", {**settings, "results": results})
    print(table(results))


if __name__ == "__main__":
    main()
