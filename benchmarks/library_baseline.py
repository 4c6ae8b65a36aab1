"""Success rate of SmolLM2-135M-Instruct on each task family of the `library` domain (the README's table).

Rolls the model out with `run_episode` on the first N test tasks of every family, with the domain's scripted member,
and writes `family_table.json` (per family: tasks, successes, success rate, mean reward; plus per difficulty),
`trajectories.jsonl` and `settings.json` under --out. The agent's prompt is `domain.system_prompt()` (its version is
recorded) with the worked example as chat turns (`domain.example_messages()`); by default the client gets no tool
schemas, because the prompt already lists the tools and SmolLM2's chat template ignores `tools` (the client would
append a second, JSON listing).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE \
        .venv/bin/python benchmarks/library_baseline.py --per-family 6
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from trace_rl.config import EnvConfig, ModelConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.envs.evaluator import action_matches
from trace_rl.envs.library import load_domain
from trace_rl.envs.library.domain import LibraryDomain
from trace_rl.models.base import SamplingParams
from trace_rl.types import Task, Trajectory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="model alias or folder (models.resolve)")
    p.add_argument("--per-family", type=int, default=6, help="test tasks per family")
    p.add_argument("--families", nargs="*", default=None, help="families to run (default: all)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=96, help="new tokens per agent turn")
    p.add_argument("--max-steps", type=int, default=24, help="orchestrator steps per episode")
    p.add_argument("--max-errors", type=int, default=5, help="tool errors that end an episode")
    p.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto", help="auto: bf16 if supported")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pass-tools", action="store_true", help="also pass the JSON tool schemas to the client")
    p.add_argument("--seed", type=int, default=0, help="episode seed (sampling seeds derive from it)")
    p.add_argument("--out", type=Path, default=Path("runs/library-baseline"))
    p.add_argument("--from-run", action="store_true", help="only rebuild the tables from --out's trajectories")
    return p.parse_args(argv)


def pick_dtype(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch

    try:
        return "bfloat16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "float32"
    except (AttributeError, RuntimeError):
        return "float32"


def pick_tasks(domain: LibraryDomain, per_family: int, families: list[str]) -> list[Task]:
    chosen: dict[str, list[Task]] = defaultdict(list)
    for task in domain.tasks("test"):
        fam = task.metadata["family"]
        if fam in families and len(chosen[fam]) < per_family:
            chosen[fam].append(task)
    return [t for f in families for t in chosen[f]]


def progress(traj: Trajectory, task: Task) -> dict[str, float]:
    """How far an episode got, short of success: a parseable call, a call that ran without error, gold calls made."""
    calls = [c for m in traj.messages if m.role == "assistant" for c in m.tool_calls or []]
    ok_ids = {m.tool_call_id for m in traj.messages if m.role == "tool" and not m.error}
    gold = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    matched = sum(any(action_matches(g, c) for c in calls) for g in gold)
    return {
        "parsed_call": float(any(c.parse_error is None for c in calls)),
        "ok_call": float(any(c.id in ok_ids for c in calls)),
        "gold_recall": matched / len(gold) if gold else 1.0,
    }


def table(trajs: list[Trajectory], tasks: dict[str, Task], key: str) -> dict[str, dict[str, Any]]:
    """Per `metadata[key]`: tasks, successes, success rate, mean reward, and the progress fractions."""
    rows: dict[str, dict[str, Any]] = {}
    for traj in trajs:
        task = tasks[traj.task_id]
        row = rows.setdefault(task.metadata[key], {"tasks": 0, "successes": 0, "reward_sum": 0.0, "progress": {}})
        row["tasks"] += 1
        row["successes"] += int(bool(traj.success))
        row["reward_sum"] += traj.reward or 0.0
        for name, value in progress(traj, task).items():
            row["progress"][name] = row["progress"].get(name, 0.0) + value
    for row in rows.values():
        n = row["tasks"]
        row["success_rate"] = round(row["successes"] / n, 3)
        row["mean_reward"] = round(row.pop("reward_sum") / n, 3)
        prog = row.pop("progress")
        row["episodes_with_parsed_call"] = round(prog["parsed_call"] / n, 3)
        row["episodes_with_ok_call"] = round(prog["ok_call"] / n, 3)
        row["gold_action_recall"] = round(prog["gold_recall"] / n, 3)
    return rows


def turn_stats(trajs: list[Trajectory]) -> dict[str, Any]:
    """How the model's turns went: tool calls (valid JSON or not), tool errors, text turns."""
    calls = parse_errors = tool_errors = texts = 0
    for traj in trajs:
        for m in traj.messages[1:]:
            if m.role == "assistant":
                texts += 0 if m.tool_calls else 1
                for c in m.tool_calls or []:
                    calls += 1
                    parse_errors += c.parse_error is not None
            elif m.role == "tool" and m.error:
                tool_errors += 1
    return {"tool_calls": calls, "unparsable_calls": parse_errors, "tool_errors": tool_errors, "text_turns": texts}


def print_table(title: str, rows: dict[str, dict[str, Any]], order: list[str]) -> None:
    print(
        f"\n{title:<22} {'tasks':>5} {'succ':>5} {'rate':>6} {'reward':>7} {'parsed':>7} {'ok_call':>7} {'recall':>7}"
    )
    for k in order:
        if k in rows:
            r = rows[k]
            print(
                f"{k:<22} {r['tasks']:>5} {r['successes']:>5} {r['success_rate']:>6.2f} {r['mean_reward']:>7.2f} "
                f"{r['episodes_with_parsed_call']:>7.2f} {r['episodes_with_ok_call']:>7.2f} "
                f"{r['gold_action_recall']:>7.2f}"
            )


def summarize(
    trajs: list[Trajectory], tasks: list[Task], domain: LibraryDomain, settings: dict[str, Any], wall: float, out: Path
) -> None:
    """Write family_table.json under `out` and print the tables."""
    families = list(dict.fromkeys(t.metadata["family"] for t in tasks))
    by_task = {t.id: t for t in tasks}
    fam_rows = table(trajs, by_task, "family")
    diff_rows = table(trajs, by_task, "difficulty")
    result = {
        "settings": settings,
        "families": fam_rows,
        "difficulties": diff_rows,
        "capability_types": {f: domain.capability_types[f] for f in families},
        "turns": turn_stats(trajs),
        "wall_s": round(wall, 1),
        "generated_tokens": sum(t.tokens.completion for t in trajs),
    }
    (out / "family_table.json").write_text(json.dumps(result, indent=2))
    print_table("family", fam_rows, families)
    print_table("difficulty", diff_rows, ["trivial", "easy", "medium", "hard"])
    print(f"\nturns: {result['turns']}  wall: {wall:.0f}s  tokens: {result['generated_tokens']}")
    print(f"wrote {out / 'family_table.json'}")


def from_run(out: Path) -> None:
    """Rebuild family_table.json from a finished run's trajectories.jsonl and settings.json (no model needed)."""
    domain = load_domain("", EnvConfig(name="library"))
    settings = json.loads((out / "settings.json").read_text())
    trajs = [Trajectory.model_validate_json(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    all_tasks = {t.id: t for t in domain.tasks("test")}
    tasks = [all_tasks[t.task_id] for t in trajs]
    old = json.loads((out / "family_table.json").read_text()) if (out / "family_table.json").is_file() else {}
    summarize(trajs, tasks, domain, settings, float(old.get("wall_s", 0.0)), out)


async def run(args: argparse.Namespace) -> None:
    import torch

    from trace_rl.models.registry import build_client

    torch.set_num_threads(args.threads)
    domain = load_domain("", EnvConfig(name="library"))
    families = args.families or list(domain.families)
    tasks = pick_tasks(domain, args.per_family, families)
    dtype = pick_dtype(args.dtype)
    cfg = ModelConfig(kind="local", model=args.model, dtype=dtype, device="cpu", max_tokens=args.max_tokens)
    t_load = time.perf_counter()
    client = build_client(cfg, name=args.model)
    load_s = time.perf_counter() - t_load
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    limits = EpisodeLimits(max_steps=args.max_steps, max_errors=args.max_errors)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "model": args.model,
        "dtype": dtype,
        "threads": args.threads,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_tokens": args.max_tokens,
        "max_steps": args.max_steps,
        "max_errors": args.max_errors,
        "pass_tools": args.pass_tools,
        "seed": args.seed,
        "per_family": args.per_family,
        "user": "library-scripted",
        "split": "test",
        **domain.prompt_record(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "model_load_s": round(load_s, 1),
        "command": " ".join(sys.argv),
    }
    (args.out / "settings.json").write_text(json.dumps(settings, indent=2))
    print(json.dumps(settings), flush=True)
    trajs: list[Trajectory] = []
    started = time.perf_counter()
    with (args.out / "trajectories.jsonl").open("w") as fh:
        for i, task in enumerate(tasks):
            env = domain.make_env()
            tools = env.tool_schemas() if args.pass_tools else []
            agent = Agent(client, domain.system_prompt(), tools, sampling=sampling, examples=domain.example_messages())
            traj = await run_episode(
                env=env,
                task=task,
                agent=agent,
                user=domain.scripted_user(task),
                spec=EpisodeSpec(env="library", split="test", seed=args.seed, model=args.model),
                limits=limits,
            )
            trajs.append(traj)
            fh.write(traj.model_dump_json() + "\n")
            fh.flush()
            print(
                f"[{i + 1}/{len(tasks)}] {task.id:<28} {task.metadata['variant']:<28} reward={traj.reward} "
                f"term={traj.termination} turns={traj.tokens.model_calls} gen={traj.tokens.completion} "
                f"{traj.timings.duration_s:.0f}s",
                flush=True,
            )
    summarize(trajs, tasks, domain, settings, time.perf_counter() - started, args.out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_run:
        from_run(args.out)
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
