"""Benchmark of the τ² environment engine (no model calls): per-step cost and gold replay of the 164 paper tasks.

For every airline and retail task, a scripted agent replays the task's gold actions (then a closing message) through
the real orchestrator (`run_episode`) with a scripted user that stops. `env.execute` is timed per tool call (one
environment step; wall and CPU time), `reset` and `score` (gold replay + hashing) per episode; the best of
--repeats passes is shown.
Then `check_domain` replays all 164 gold tasks (airline 50 + retail 114), cold (first call for the domain and task
set: task-file parsing, plus db.json loading the first time a domain is seen) and warm (best of --repeats).
Rewards use the paper's basis [DB, COMMUNICATE].

    .venv/bin/python benchmarks/bench_tau2_engine.py [--task-set head|v0.2|both] [--repeats 3] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from trace_rl.config import EnvConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.base import ToolkitEnvironment
from trace_rl.envs.check import check_domain
from trace_rl.envs.registry import load_domain
from trace_rl.testing.playback import PlaybackClient, PlaybackUser, gold_messages

DOMAINS = ("airline", "retail")


@dataclass
class Timing:
    execute_s: list[float] = field(default_factory=list)
    execute_cpu_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    score_s: list[float] = field(default_factory=list)
    episode_s: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)


class TimedEnvironment(ToolkitEnvironment):
    """Times the agent's tool calls, resets and scoring; the evaluator's gold replay counts as scoring."""

    timing = Timing()
    scoring = False

    def execute(self, call):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = super().execute(call)
        if not TimedEnvironment.scoring:
            TimedEnvironment.timing.execute_s.append(time.perf_counter() - t0)
            TimedEnvironment.timing.execute_cpu_s.append(time.thread_time() - c0)
        return out

    def reset(self, task, seed=None):
        t0 = time.perf_counter()
        out = super().reset(task, seed)
        if not TimedEnvironment.scoring:
            TimedEnvironment.timing.reset_s.append(time.perf_counter() - t0)
        return out

    async def score(self, *args, **kwargs):
        TimedEnvironment.scoring = True
        t0 = time.perf_counter()
        try:
            return await super().score(*args, **kwargs)
        finally:
            TimedEnvironment.timing.score_s.append(time.perf_counter() - t0)
            TimedEnvironment.scoring = False


def run_gold_episodes(dom) -> Timing:
    timing = TimedEnvironment.timing = Timing()
    for task in dom.tasks("base"):
        env = dom.make_env()
        env.__class__ = TimedEnvironment  # fresh() copies keep the class, so the gold replay is timed as scoring
        agent = Agent(PlaybackClient(gold_messages(task)), dom.system_prompt(), env.tool_schemas())
        user = PlaybackUser(["Hello, I need some help."])
        t0 = time.perf_counter()
        traj = asyncio.run(
            run_episode(
                env=env,
                task=task,
                agent=agent,
                user=user,
                spec=EpisodeSpec(env=dom.name, split="base"),
                limits=EpisodeLimits(max_steps=400),
            )
        )
        timing.episode_s.append(time.perf_counter() - t0)
        timing.rewards.append(traj.reward or 0.0)
    return timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task-set", choices=["head", "v0.2", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3, help="passes per measurement (the best is reported)")
    parser.add_argument("--data-dir", type=Path, default=None, help="τ² data dir (default: TRACE_TAU2_DATA, ../shared)")
    args = parser.parse_args()
    task_sets = ["head", "v0.2"] if args.task_set == "both" else [args.task_set]

    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; no model calls")
    header = (
        f"{'domain':8} {'set':5} {'tasks':>5} {'calls':>6} {'execute µs':>11} {'cpu µs':>7} {'reset ms':>9} "
        f"{'score ms':>9} {'episode ms':>11} {'reward=1':>8} {'replay cold s':>14} {'replay warm s':>14}"
    )
    print(header)
    print("-" * len(header))
    totals: dict[str, list[float]] = {}
    for task_set in task_sets:
        for name in DOMAINS:
            # paper grading: no NL judge needed; reward = DB x COMMUNICATE
            cfg = EnvConfig(
                name=f"tau2:{name}", data_dir=args.data_dir, task_set=task_set, reward_basis=["DB", "COMMUNICATE"]
            )
            dom = load_domain(f"tau2:{name}", cfg)
            t0 = time.perf_counter()
            result = check_domain(dom, ["base"])
            cold = time.perf_counter() - t0
            warm = []
            for _ in range(max(1, args.repeats)):
                t0 = time.perf_counter()
                check_domain(dom, ["base"])
                warm.append(time.perf_counter() - t0)
            runs = [run_gold_episodes(dom) for _ in range(max(1, args.repeats))]
            timing = min(runs, key=lambda t: statistics.mean(t.episode_s))  # best pass: least disturbed by load
            totals.setdefault(task_set, [0.0, 0.0, 0])  # type: ignore[list-item]
            totals[task_set][0] += cold
            totals[task_set][1] += min(warm)
            totals[task_set][2] += result.total
            print(
                f"{name:8} {task_set:5} {result.total:5d} {len(timing.execute_s):6d} "
                f"{statistics.mean(timing.execute_s) * 1e6:11.1f} {statistics.mean(timing.execute_cpu_s) * 1e6:7.1f} "
                f"{statistics.mean(timing.reset_s) * 1e3:9.2f} "
                f"{statistics.mean(timing.score_s) * 1e3:9.2f} {statistics.mean(timing.episode_s) * 1e3:11.2f} "
                f"{sum(r == 1.0 for r in timing.rewards):8d} {cold:14.2f} {min(warm):14.3f}"
            )
            assert result.matched == result.total, result.line
    for task_set, (cold, warm, n) in totals.items():
        print(f"gold replay of all {int(n)} tasks ({task_set}): cold {cold:.2f} s, warm {warm:.3f} s (check_domain)")


if __name__ == "__main__":
    main()
