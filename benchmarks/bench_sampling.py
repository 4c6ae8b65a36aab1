"""Library episodes per minute with SmolLM2-135M: transformers in process (1 in flight) against a vLLM server at 1, 8
and 32 episodes in flight, on the same test tasks and settings, side by side in one invocation (the README's table).

Each arm is one `trace-rl rollout` of the same tasks (library test split, the domain's scripted member) in its own run
folder. The vLLM arms share one managed server (`models/managed_server.py`, started once before them; its start time is
reported apart) and reach it as a `kind: vllm` model with its `base_url`; the transformers arm is `kind: local` in
bf16. Reported per arm: wall seconds of the rollout (as the command reports it: models loaded, server up), episodes
per minute, completion tokens per second, success rate with a 95% bootstrap interval over tasks, and the speed-up over
transformers at 1 in flight. Both paths render the same prompt and parse the same way (`PromptFormat`), so success
rates should agree within their intervals; they are sampled (temperature 0.7), not identical.

    .venv/bin/python benchmarks/bench_sampling.py --tasks 16 --out runs/bench-sampling
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

for _key, _value in (("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_key, _value)

WALL = re.compile(r"·\s*([0-9.]+) s\s*$", re.M)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--tasks", type=int, default=16, help="library test tasks (the first N)")
    p.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 32], help="vLLM arms: episodes in flight")
    p.add_argument("--no-transformers", action="store_true", help="skip the transformers arm")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument(
        "--cpu-threads-bind",
        default=None,
        help="the managed server's VLLM_CPU_OMP_THREADS_BIND (auto, nobind, or a CPU list such as 0-1); default vLLM's",
    )
    p.add_argument("--out", type=Path, default=Path("runs/bench-sampling"))
    return p.parse_args(argv)


def write_config(out: Path, name: str, model: dict[str, Any], args: argparse.Namespace, concurrency: int) -> Path:
    cfg = {
        "run": {"name": name, "runs_dir": str(out)},
        "models": {"policy": {**model, "temperature": args.temperature, "max_tokens": args.max_tokens}},
        "env": {"name": "library", "max_steps": args.max_steps, "max_errors": 3},
        "rollout": {
            "policy": "policy",
            "user": "scripted",
            "split": "test",
            "trials": 1,
            "concurrency": concurrency,
            "task_limit": args.tasks,
        },
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(cfg, indent=2))
    return path


def run_arm(out: Path, name: str, config: Path) -> dict[str, Any]:
    import shutil

    shutil.rmtree(out / name, ignore_errors=True)
    cmd = [sys.executable, "-m", "trace_rl.cli", "rollout", "--config", str(config)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    command_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: rollout failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    walls = WALL.findall(proc.stdout)
    wall = float(walls[-1]) if walls else command_s
    from trace_rl.stats import bootstrap_ci

    trajs = [json.loads(x) for x in (out / name / "rollout" / "trajectories.jsonl").read_text().splitlines()]
    success = [float(bool(t.get("success"))) for t in trajs]
    tokens = sum(len((m.get("sampled") or {}).get("completion_ids") or []) for t in trajs for m in t["messages"])
    lo, hi = bootstrap_ci(success, seed=0) if success else (0.0, 0.0)
    infra = sum(1 for t in trajs if t.get("infra_error"))
    return {
        "episodes": len(trajs),
        "infra_failures": infra,
        "wall_s": round(wall, 1),
        "command_s": round(command_s, 1),
        "episodes_per_min": round(len(trajs) / wall * 60, 2),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "success_rate": round(sum(success) / max(1, len(success)), 3),
        "success_ci95": [round(lo, 3), round(hi, 3)],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from trace_rl.config.serving import VLLMServerSettings
    from trace_rl.models.managed_server import server_for, stop_managed_servers
    from trace_rl.models.resolve import resolve_model_path

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = resolve_model_path(args.model)
    arms: dict[str, dict[str, Any]] = {}
    if not args.no_transformers:
        cfg = write_config(out, "transformers-c1", {"kind": "local", "model": str(path), "dtype": "bfloat16"}, args, 1)
        arms["transformers-c1"] = run_arm(out, "transformers-c1", cfg)
        print("transformers-c1", arms["transformers-c1"], flush=True)
    t0 = time.perf_counter()
    server = server_for(path, VLLMServerSettings(cpu_threads_bind=args.cpu_threads_bind))
    startup_s = time.perf_counter() - t0
    try:
        for c in args.concurrency:
            model = {"kind": "vllm", "model": str(path), "base_url": f"{server.root_url}/v1", "concurrency": max(1, c)}
            name = f"vllm-c{c}"
            arms[name] = run_arm(out, name, write_config(out, name, model, args, c))
            print(name, arms[name], flush=True)
    finally:
        stop_managed_servers()
    ref = arms.get("transformers-c1")
    for row in arms.values():
        row["speedup_vs_transformers_c1"] = round(row["episodes_per_min"] / ref["episodes_per_min"], 2) if ref else None
    result = {
        "settings": {**{k: str(v) for k, v in vars(args).items()}, "model_path": str(path)},
        "vllm_startup_s": round(startup_s, 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "arms": arms,
    }
    (out / "bench_sampling.json").write_text(json.dumps(result, indent=2))
    print(f"\nvLLM server healthy after {startup_s:.0f} s (not counted below)")
    print("| arm | episodes | wall s | episodes/min | tokens/s | success [95% CI] | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for name, r in arms.items():
        ci = r["success_ci95"]
        print(
            f"| {name} | {r['episodes']} | {r['wall_s']} | {r['episodes_per_min']} | {r['tokens_per_s']} | "
            f"{r['success_rate']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] | {r['speedup_vs_transformers_c1']}× |"
        )


if __name__ == "__main__":
    main()
