"""Rollout throughput on Ray: episodes/s of the library domain with a fast scripted model, at 1, 2 and 4 Ray episode
workers, against the local executor (one event loop in this process) at the same number of episodes in flight.

The model client plays the library oracle's gold plan for each task (found from the conversation's opening
request), so episodes have realistic length and succeed; `--latency-ms` adds a simulated server latency per model
call (an `asyncio.sleep`: a server with unlimited parallelism). Every cell runs the same episodes into a fresh
store, after a warm-up that creates the workers and ships them the episode factory, so the numbers are steady-state
throughput and exclude the Ray start (about 5 s here) and actor creation (1-2 s per worker). The driver still writes
every trajectory (one writer, fsynced batches), exactly as in a real run.

    .venv/bin/python benchmarks/bench_ray_rollout.py                        # 0 and 20 ms, local + 1/2/4 workers
    .venv/bin/python benchmarks/bench_ray_rollout.py --latency-ms 0 --workers 1 2 --out r.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trace_rl.artifacts.store import JsonlStore
from trace_rl.config import EnvConfig, ExecutorConfig
from trace_rl.engine.episode import GREETING, EpisodeLimits
from trace_rl.engine.plan import plan_jobs
from trace_rl.engine.runner import EpisodeFactory, run_rollout
from trace_rl.envs.library.oracle import plan
from trace_rl.envs.registry import load_domain
from trace_rl.executor.local import LocalExecutor
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Message

ENV = {"name": "library", "options": {"n_train": 100, "n_test": 10}}


class OracleByOpening:
    """The oracle's gold plan of whichever task the conversation's opening request belongs to."""

    name = "oracle"

    def __init__(self, plans: dict[str, list[Message]], latency_s: float) -> None:
        self.plans = plans
        self.latency_s = latency_s

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        # the domain's prompt puts worked examples before the conversation: the opening is the first known request
        at = next(i for i, m in enumerate(messages) if m.role == "user" and m.text in self.plans)
        steps = self.plans[messages[at].text]
        done = sum(1 for m in messages[at:] if m.role == "assistant")
        step = steps[min(done, len(steps) - 1)].model_copy(deep=True)
        return ModelResponse(message=step, prompt_tokens=64, completion_tokens=16)

    async def aclose(self) -> None:
        return None


def factory(latency_ms: float) -> tuple[EpisodeFactory, list[Any]]:
    domain = load_domain("library", EnvConfig.model_validate(ENV))
    tasks = domain.tasks("train")
    plans = {}
    for task in tasks:
        opening = asyncio.run(domain.scripted_user(task).reply([Message(role="assistant", content=GREETING)]))
        plans.setdefault(opening.text, plan(task))
    client = OracleByOpening(plans, latency_ms / 1000)
    made = EpisodeFactory(
        domain=domain,
        env_name="library",
        split="train",
        client=client,
        model_name="oracle",
        limits=EpisodeLimits(max_steps=40, max_errors=10),
        token_ids="none",
    )
    return made, tasks


def measure(executor: Any, made: EpisodeFactory, tasks: list[Any], episodes: int, concurrency: int) -> dict[str, Any]:
    trials = -(-episodes // len(tasks))
    jobs = plan_jobs("library", "train", tasks, trials, 300)[:episodes]
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(
            run_rollout(
                jobs[:16], made, JsonlStore(Path(tmp) / "warm.jsonl"), concurrency=concurrency, executor=executor
            )
        )
        store = JsonlStore(Path(tmp) / "trajectories.jsonl")
        started = time.perf_counter()
        result = asyncio.run(run_rollout(jobs, made, store, concurrency=concurrency, executor=executor))
        wall = time.perf_counter() - started
        records = store.records()
    assert len(records) == len({r["id"] for r in records}) == episodes
    return {
        "episodes": result.ran,
        "wall_s": round(wall, 2),
        "episodes_per_s": round(result.ran / wall, 1),
        "success_rate": round(result.successes / max(1, result.scored), 3),
        "infra": result.infra,
        "model_calls_per_episode": round(result.model_calls / max(1, result.ran), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--latency-ms", nargs="+", type=float, default=[0.0, 20.0])
    parser.add_argument("--episodes", type=int, default=300, help="Episodes per cell.")
    parser.add_argument("--per-worker", type=int, default=8, help="Episodes in flight per Ray worker.")
    parser.add_argument("--out", type=Path, help="Also write the rows as JSON here.")
    args = parser.parse_args()

    import ray

    from trace_rl.executor.ray_executor import RayExecutor

    started = time.perf_counter()
    ray.init(num_cpus=max(args.workers), include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    ray_start_s = round(time.perf_counter() - started, 1)
    rows = []
    try:
        for latency in args.latency_ms:
            made, tasks = factory(latency)
            cells: list[tuple[str, int, Any, int]] = []
            for n in args.workers:  # the local executor with as many episodes in flight as n Ray workers
                cfg = ExecutorConfig(kind="ray", num_workers=n, episodes_per_worker=args.per_worker)
                cells.append(("local", 0, LocalExecutor(), args.per_worker * n))
                cells.append(("ray", n, RayExecutor(cfg), args.per_worker * n))
            for kind, n, executor, concurrency in cells:
                try:
                    row = {
                        "executor": kind,
                        "workers": n,
                        "latency_ms": latency,
                        "in_flight": concurrency,
                        **measure(executor, made, tasks, args.episodes, concurrency),
                    }
                finally:
                    executor.close()
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
    meta = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "ray": ray.__version__,
        "ray_start_s": ray_start_s,
        "argv": sys.argv[1:],
    }
    print(json.dumps(meta))
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
