"""ToolSandbox's table for a trace-rl rollout on a ToolSandbox task set, beside the do-nothing floor.

Reads the latest trajectory of every (task, trial) of a run directory written by `trace-rl rollout` on
`toolsandbox:<set>` (e.g. `-c configs/toolsandbox.yaml --split all`), plays the do-nothing agent (one apology,
ToolSandbox's UnhelpfulAgent; the scripted user) on the same tasks, and writes `toolsandbox_table.json` and `.md`
under --out: perfect scores (similarity 1.0) as a count, mean similarity, pass^k, per scenario category.

    .venv/bin/trace-rl rollout -c configs/toolsandbox.yaml --split all --run runs/ts-smollm2
    .venv/bin/python benchmarks/toolsandbox_table.py --run runs/ts-smollm2 --out runs/ts-smollm2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from trace_rl.artifacts.layout import ROLLOUT_TRAJECTORIES
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.config import EnvConfig
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.registry import load_domain
from trace_rl.envs.toolsandbox.scoreboard import markdown_table, scoreboard
from trace_rl.models.scripted import ScriptedClient
from trace_rl.types import Task, Trajectory

SORRY = "I am sorry, but I cannot assist with that."


async def floor(domain, tasks: list[Task]) -> list[Trajectory]:
    out = []
    for task in tasks:
        env = domain.make_env()
        agent = Agent(ScriptedClient([SORRY], on_exhausted="repeat_last"), domain.system_prompt(), [])
        spec = EpisodeSpec(env=domain.name, split="all", trajectory_id=f"floor-{task.id}")
        out.append(await run_episode(env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="run directory of a toolsandbox rollout")
    p.add_argument("--out", type=Path, default=None, help="where to write the table (default: the run directory)")
    p.add_argument("--k", type=int, nargs="*", default=[1], help="pass^k to report")
    args = p.parse_args(argv)
    path = args.run / ROLLOUT_TRAJECTORIES
    if not path.is_file():
        print(f"error: {path} not found (run trace-rl rollout first)", file=sys.stderr)
        return 2
    latest, _ = read_trajectories(path)
    envs = sorted({t.env for t in latest.values()})
    if len(envs) != 1 or not envs[0].startswith("toolsandbox:"):
        print(f"error: {path} is not one toolsandbox rollout (environments: {envs})", file=sys.stderr)
        return 2
    domain = load_domain(envs[0], EnvConfig(name=envs[0]))
    task_ids = {t.task_id for t in latest.values()}
    tasks = [t for t in domain.tasks("all") if t.id in task_ids]
    agent = scoreboard(latest.values(), tasks, ks=args.k)
    floor_board = scoreboard(asyncio.run(floor(domain, tasks)), tasks, ks=args.k)
    models = sorted({t.model for t in latest.values()})
    out = args.out or args.run
    out.mkdir(parents=True, exist_ok=True)
    table = {
        "env": envs[0],
        "tasks": len(tasks),
        "model": models,
        "agent": agent.as_dict(),
        "floor": floor_board.as_dict(),
    }
    (out / "toolsandbox_table.json").write_text(json.dumps(table, indent=2) + "\n")
    md = markdown_table({"agent": agent, "do-nothing floor": floor_board})
    (out / "toolsandbox_table.md").write_text(md + "\n")
    print(md)
    print(f"unscored (infrastructure failures): {agent.unscored}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
