"""Rollout engine throughput with a scripted fast model client (no server): episodes/s and overhead per step.

The client replays each task's gold actions as tool calls, then answers with the task's required information, so
episodes have realistic length and mostly succeed; `--latency-ms` adds a simulated server latency per model call
(an `asyncio.sleep`, i.e. a server with unlimited parallelism). At latency 0 the wall time is all engine: environment
copies, tool execution, the scripted user, scoring, trajectory serialization and the fsynced JSONL appends. With
latency, throughput should grow with concurrency until the single event-loop thread saturates.

    .venv/bin/python benchmarks/bench_rollout.py                       # tau2:mock + library, 1/4/16/64, 0 and 20 ms
    .venv/bin/python benchmarks/bench_rollout.py --latency-ms 0 --concurrency 1 16 --envs library --out r.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trace_rl.artifacts.store import JsonlStore
from trace_rl.config import EnvConfig
from trace_rl.engine.episode import GREETING, EpisodeLimits
from trace_rl.engine.plan import plan_jobs
from trace_rl.engine.runner import EpisodeFactory, run_rollout
from trace_rl.envs.base import Domain
from trace_rl.envs.registry import load_domain
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.types import Message, SampledTokens, Task, ToolCall

SPLITS = {"tau2:mock": "base", "library": "train"}


class GoldReplayClient:
    """A model client that plays each task's gold actions, then states the task's `communicate_info`."""

    name = "gold-replay"

    def __init__(self, tasks_by_opening: dict[str, Task], latency_s: float) -> None:
        self.tasks_by_opening = tasks_by_opening
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
        # the first user message that opens a known task (a domain's worked-example turns come before it)
        at = next((i for i, m in enumerate(messages) if m.role == "user" and m.text in self.tasks_by_opening), None)
        task = self.tasks_by_opening[messages[at].text] if at is not None else None
        criteria = task.evaluation_criteria if task else None
        actions = [a for a in (criteria.actions or []) if a.requestor == "assistant"] if criteria else []
        done = sum(1 for m in messages[at or 0 :] if m.role == "assistant" and m.tool_calls)
        tokens = SampledTokens(prompt_ids=list(range(64)), completion_ids=list(range(16)))
        if done < len(actions):
            action = actions[done]
            call = ToolCall(id=f"call_{len(messages)}", name=action.name, arguments=action.arguments)
            message = Message(role="assistant", tool_calls=[call], sampled=tokens)
        else:
            info = " ".join((criteria.communicate_info or []) if criteria else [])
            message = Message(role="assistant", content=f"All done. {info}".strip(), sampled=tokens)
        return ModelResponse(message=message, prompt_tokens=64, completion_tokens=16)

    async def aclose(self) -> None:
        return None


async def openings(domain: Domain, tasks: list[Task]) -> dict[str, Task]:
    """First user message -> task (tasks sharing an opening keep the first; their gold actions coincide in mock)."""
    out: dict[str, Task] = {}
    for task in tasks:
        user = domain.scripted_user(task)
        reply = await user.reply([Message(role="assistant", content=GREETING)])
        out.setdefault(reply.text, task)
    return out


def bench(env: str, concurrency: int, latency_ms: float, episodes: int) -> dict[str, Any]:
    domain = load_domain(env, EnvConfig(name=env))
    split = SPLITS[env]
    tasks = [t for t in domain.tasks(split) if domain.scripted_user(t) is not None]  # mock: 8 of 10 have one
    trials = max(1, -(-episodes // len(tasks)))
    jobs = plan_jobs(env, split, tasks, trials, 300)[:episodes]
    client = GoldReplayClient(asyncio.run(openings(domain, tasks)), latency_ms / 1000)
    factory = EpisodeFactory(
        domain=domain, env_name=env, split=split, client=client, model_name="gold-replay", limits=EpisodeLimits(30, 10)
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = JsonlStore(Path(tmp) / "trajectories.jsonl")
        started = time.perf_counter()
        result = asyncio.run(run_rollout(jobs, factory, store, concurrency=concurrency))
        wall = time.perf_counter() - started
        records = store.records()
    steps = sum(len(r["messages"]) for r in records)
    calls = result.model_calls
    row = {
        "env": env,
        "concurrency": concurrency,
        "latency_ms": latency_ms,
        "episodes": result.ran,
        "wall_s": round(wall, 3),
        "episodes_per_s": round(result.ran / wall, 1),
        "model_calls": calls,
        "calls_per_episode": round(calls / result.ran, 2),
        "messages_per_episode": round(steps / result.ran, 2),
        "success_rate": round(result.successes / max(1, result.scored), 3),
        "infra": result.infra,
    }
    if latency_ms == 0:
        # everything but the scripted model runs on the one event-loop thread, so time is additive: wall time minus
        # the environment's own time (tool calls, scoring, the scripted user; measured by the orchestrator) is the
        # engine's (episode setup, DB copy for the episode, loop scheduling, serialization, appends)
        env_s = sum(r["timings"]["env_s"] + r["timings"]["user_s"] for r in records)
        row["ms_per_model_call"] = round(1000 * wall / calls, 3)
        row["env_ms_per_model_call"] = round(1000 * env_s / calls, 3)
        row["engine_ms_per_model_call"] = round(1000 * (wall - env_s) / calls, 3)
        row["engine_ms_per_message"] = round(1000 * (wall - env_s) / steps, 3)
    else:
        ideal = concurrency / (row["calls_per_episode"] * latency_ms / 1000)
        row["ideal_episodes_per_s"] = round(ideal, 1)
        row["efficiency"] = round(row["episodes_per_s"] / ideal, 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["tau2:mock", "library"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--latency-ms", nargs="+", type=float, default=[0.0, 20.0])
    parser.add_argument("--episodes", type=int, default=400, help="Episodes per run at latency 0.")
    parser.add_argument("--out", type=Path, help="Also write the rows as JSON here.")
    args = parser.parse_args()
    rows = []
    for latency in args.latency_ms:
        for env in args.envs:
            for c in args.concurrency:
                # with latency, size each run to ~8 waves of episodes so the slow low-concurrency runs stay short
                n = args.episodes if latency == 0 else max(40, 8 * c)
                row = bench(env, c, latency, n)
                rows.append(row)
                print(json.dumps(row), flush=True)
    meta = {"python": sys.version.split()[0], "platform": platform.platform(), "argv": sys.argv[1:]}
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
