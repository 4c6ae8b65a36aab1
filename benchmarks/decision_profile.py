"""Success of the base policy and of trained adapters on each library decision, one at a time (issue #18).

A library task fails when any one of its moves is wrong. This script opens library tasks at each decision point of
`envs/synthetic/library_decisions.py` (the gold moves before it replayed, the target's tools, DB, prompt and scripted
member) and scores the agent's move there, for the base model and for each adapter given, on the same seeds and
sampling seeds (paired). What it shows: which single decisions the base gets wrong, and what each adapter changed on
its own decision and on the others (the "targeted" question, asked decision by decision rather than family by family).

The environments are built from a run's capability environment spec (its target, tools and seed range), with the
decisions replaced by one decision at a time; the seeds are that spec's test split, which training never draws.
Sampling goes through the run's policy model (a vLLM server for `kind: vllm`), with the run's synthesize settings
(max tokens, step and error limits) unless overridden.

    HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/decision_profile.py \\
        --run runs/decisions-library --adapter runs/decisions-library/adapters/tool_call_formatting \\
        --seeds 16 --samples 4 --temperature 0.3 --out runs/decision-profile

`--hint TEXT` adds the arm `base+hint`: the base with TEXT as the environment's hint in its system prompt (does
guidance make a decision the base never makes reachable, so that GRPO's groups would carry a signal?).

Writes `profile.json` (per arm and decision: n, successes, success rate with a 95% bootstrap CI over seeds, the
paired difference to the base, terminations, the agent's first move at the decision point, and the right moves per
request kind; rewritten after each cell, so a stopped run keeps what it measured), `profile.md` (the tables: per
decision, and per decision and request kind) and `settings.json` under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from trace_rl.artifacts.environments import HintSpec, read_env_spec
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.store import RunDir, atomic_write_json, atomic_write_text
from trace_rl.config import TraceConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.envs.synthetic import CapabilityEnvironment
from trace_rl.envs.synthetic.library_decisions import DECISIONS, Case, agent_moves
from trace_rl.errors import UserError
from trace_rl.models.registry import build_clients
from trace_rl.stage import load_run_config
from trace_rl.stats import bootstrap_ci
from trace_rl.synthesize.calibrate import Rollout, bounded, collect
from trace_rl.types import Task


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="a run with at least one library_decisions environment")
    p.add_argument("--env", default=None, help="the capability environment whose spec to start from (default: first)")
    p.add_argument("--adapter", action="append", default=[], type=Path, help="a PEFT adapter folder (repeatable)")
    p.add_argument(
        "--hint", default=None, help="also play the base with this hint in its system prompt (arm base+hint)"
    )
    p.add_argument(
        "--target-prompt", default=None, help="the library prompt version the agent gets (default: the run's)"
    )
    p.add_argument(
        "--decisions", nargs="*", default=list(DECISIONS), choices=list(DECISIONS), help="default: all of them"
    )
    p.add_argument("--seeds", type=int, default=16, help="task seeds per decision (the spec's test split)")
    p.add_argument("--samples", type=int, default=4, help="samples per seed")
    p.add_argument("--temperature", type=float, default=0.3)
    p.add_argument("--max-tokens", type=int, default=None, help="default: the run's synthesize.max_tokens")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def decision_envs(
    run: RunDir, env_name: str | None, decisions: list[str], hint: str | None = None, prompt: str | None = None
) -> dict[str, CapabilityEnvironment]:
    """One environment per decision, from the run's `envs/<env>/spec.json` with only that decision left (and `hint`
    as its hint, when given)."""
    folders = sorted(p for p in (run.root / "envs").iterdir() if (p / "spec.json").is_file())
    folders = [p for p in folders if env_name in (None, p.name)]
    specs = [(p, read_env_spec(EnvLayout(p))) for p in folders]
    specs = [(p, s) for p, s in specs if s.generator.kind == "library_decisions"]
    if not specs:
        raise UserError(
            f"{run.root}: no library_decisions environment under envs/" + (f" named {env_name}" * bool(env_name))
        )
    folder, spec = specs[0]
    envs = {}
    for name in decisions:
        params = {**spec.generator.params, "decisions": {name: 1.0}, "moves": []}
        update: dict[str, Any] = {"generator": spec.generator.model_copy(update={"params": params})}
        if hint is not None:
            update["hint"] = HintSpec(text=hint, fraction=1.0)
        if prompt is not None:
            update["target"] = {**spec.target, "options": {**spec.target.get("options", {}), "prompt": prompt}}
        one = spec.model_copy(deep=True, update=update)
        envs[name] = CapabilityEnvironment(one, folder, status="ready")  # the folder's leak index stays on
    return envs


def rates(rollouts: list[Rollout]) -> dict[int, float]:
    """Per seed: the share of its samples that made the right move."""
    by_seed: dict[int, list[bool]] = defaultdict(list)
    for r in rollouts:
        by_seed[r.seed].append(r.success)
    return {seed: sum(v) / len(v) for seed, v in by_seed.items()}


def summarize(
    env: CapabilityEnvironment, arm: str, rollouts: list[Rollout], base: dict[int, float] | None
) -> dict[str, Any]:
    per_seed = rates(rollouts)
    tasks = {seed: env.make_task(seed) for seed in per_seed}  # each seed's task opened once, not once per rollout
    values = [per_seed[s] for s in sorted(per_seed)]
    row: dict[str, Any] = {
        "arm": arm,
        "n": len(rollouts),
        "successes": sum(r.success for r in rollouts),
        "success": sum(values) / len(values) if values else 0.0,
        "ci": list(bootstrap_ci(values)) if values else [0.0, 0.0],
        "terminations": dict(sorted(Counter(str(r.trajectory.termination) for r in rollouts).items())),
        "first_moves": dict(Counter(first_move(tasks[r.seed], r) for r in rollouts).most_common(6)),
        "by_kind": by_kind(tasks, rollouts),
        "replies": replies(tasks, rollouts),
    }
    if base is not None:
        seeds = sorted(set(per_seed) & set(base))
        diffs = [per_seed[s] - base[s] for s in seeds]  # paired by seed (and by sampling seed within it)
        row["diff_to_base"] = {"mean": sum(diffs) / len(diffs), "ci": list(bootstrap_ci(diffs))}
    return row


def request_kind(task: Task) -> str:
    """The kind of request the decision is about (`renew`, `check_out`, ...; the task's variant when the decision
    names no request)."""
    request = Case.of(task).expected.get("request")
    return str(request["kind"]) if request else str(task.metadata.get("variant", "-")).split("/")[0]


def by_kind(tasks: dict[int, Task], rollouts: list[Rollout]) -> dict[str, list[int]]:
    """Per request kind: [right moves, episodes] (does a decision carry over to the kinds the prompt never shows?)."""
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rollouts:
        counts = tally[request_kind(tasks[r.seed])]
        counts[0] += r.success
        counts[1] += 1
    return dict(sorted(tally.items()))


def replies(tasks: dict[int, Task], rollouts: list[Rollout], per_kind: int = 3) -> dict[str, list[str]]:
    """Per request kind, the first few wrong episodes' first reply at the decision point (what the agent says
    instead), cut to 200 characters."""
    found: dict[str, list[str]] = defaultdict(list)
    for r in rollouts:
        kind = request_kind(tasks[r.seed])
        if r.success or len(found[kind]) >= per_kind:
            continue
        moves = agent_moves(Case.of(tasks[r.seed]), r.trajectory.messages)
        text = next((m.content for m in moves if m.content and not m.tool_calls), None)
        if text:
            found[kind].append(text[:200])
    return dict(sorted(found.items()))


def kind_table(profile: dict[str, dict[str, dict[str, Any]]], arms: list[str]) -> str:
    """Right moves / episodes per decision, request kind and arm."""
    lines = ["| decision | request kind | " + " | ".join(arms) + " |", "|" + "---|" * (2 + len(arms))]
    for decision, by_arm in profile.items():
        kinds = sorted({k for row in by_arm.values() for k in row["by_kind"]})
        for kind in kinds:
            cells = ["{}/{}".format(*row["by_kind"].get(kind, [0, 0])) for row in by_arm.values()]
            lines.append(f"| {decision} | {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def first_move(task: Task, rollout: Rollout) -> str:
    """What the agent did at the decision point of `task`: the tool it called, `text` for a reply, `none`."""
    moves = agent_moves(Case.of(task), rollout.trajectory.messages)
    if not moves:
        return "none"
    calls = moves[0].tool_calls
    return calls[0].name if calls else "text"


def table(profile: dict[str, dict[str, dict[str, Any]]], arms: list[str]) -> str:
    head = "| decision | " + " | ".join(f"{a} success % [95% CI]" for a in arms)
    head += "".join(f" | Δ {a} (paired)" for a in arms[1:]) + " |"
    lines = [head, "|" + "---|" * (2 * len(arms))]  # the decision, each arm's rate, each adapter's Δ
    for decision, by_arm in profile.items():
        cells = [f"{100 * r['success']:.1f} [{100 * r['ci'][0]:.1f}, {100 * r['ci'][1]:.1f}]" for r in by_arm.values()]
        for arm in arms[1:]:
            d = by_arm[arm]["diff_to_base"]
            cells.append(f"{100 * d['mean']:+.1f} [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]")
        lines.append(f"| {decision} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


async def profile_arms(
    args: argparse.Namespace, cfg: TraceConfig, envs: dict[str, CapabilityEnvironment], save: Any
) -> dict[str, Any]:
    """Every decision × arm; `save(partial result)` after each, so a stopped run keeps what it measured."""
    syn = cfg.synthesize
    clients = build_clients(cfg, [syn.policy])
    client = clients[syn.policy]
    arms: dict[str, tuple[str | None, bool]] = {"base": (None, False)}  # arm -> (adapter, hinted)
    if args.hint is not None:
        arms["base+hint"] = (None, True)
    for folder in args.adapter:
        name = f"{folder.parent.parent.name}-{folder.name}"  # run and capability: unique across runs
        client.load_adapter(name, folder)
        arms[name] = (name, False)
    limits = EpisodeLimits(max_steps=syn.max_steps or cfg.env.max_steps, max_errors=cfg.env.max_errors)
    profile: dict[str, dict[str, dict[str, Any]]] = {}
    timings: dict[str, float] = {}
    try:
        for decision, env in envs.items():
            seeds = list(env.spec.splits.seeds("test"))[: args.seeds]
            base_rates: dict[int, float] | None = None
            profile[decision] = {}
            for arm, (adapter, hinted) in arms.items():
                started = time.perf_counter()
                rollouts = await collect(
                    env,
                    client,
                    seeds=seeds,
                    samples=args.samples,
                    temperature=args.temperature,
                    max_tokens=args.max_tokens or syn.max_tokens,
                    concurrency=args.concurrency,
                    limits=bounded(limits, env.agent_turns),
                    model_name=syn.policy,
                    adapter=adapter,
                    hinted=hinted,
                )
                timings[f"{decision}/{arm}"] = round(time.perf_counter() - started, 1)
                profile[decision][arm] = summarize(env, arm, rollouts, base_rates)
                base_rates = rates(rollouts) if arm == "base" else base_rates
                row = profile[decision][arm]
                save({"profile": profile, "arms": list(arms), "timings_s": timings, "complete": False})
                print(f"{decision:22s} {arm:48s} {row['successes']:4d}/{row['n']:<4d} {100 * row['success']:5.1f} %")
    finally:
        await clients.aclose()
    return {"profile": profile, "arms": list(arms), "timings_s": timings, "complete": True}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:  # bad input: one line, exit 2, before anything is written
        run = RunDir(args.run)
        run.require()
        cfg = load_run_config(run, None)
        envs = decision_envs(run, args.env, list(args.decisions), args.hint, args.target_prompt)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "run": str(args.run),
        "adapters": [str(a) for a in args.adapter],
        "hint": args.hint,
        "target_prompt": args.target_prompt,
        "seeds": args.seeds,
        "samples": args.samples,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "python": platform.python_version(),
    }
    atomic_write_json(args.out / "settings.json", settings)
    started = time.perf_counter()
    result = asyncio.run(
        profile_arms(args, cfg, envs, lambda part: atomic_write_json(args.out / "profile.json", {**settings, **part}))
    )
    result["wall_s"] = round(time.perf_counter() - started, 1)
    atomic_write_json(args.out / "profile.json", {**settings, **result})
    text = table(result["profile"], result["arms"]) + "\n" + kind_table(result["profile"], result["arms"])
    atomic_write_text(args.out / "profile.md", text)
    print(text)
    print(json.dumps({"wall_s": result["wall_s"]}))


if __name__ == "__main__":
    main()
