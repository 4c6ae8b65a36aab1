"""`trace-rl report` on a rollout run: per environment and split, episode accounting, pass^1..pass^k with 95%
bootstrap intervals over tasks, mean reward, termination reasons, tokens; infrastructure failures apart.

Reads only the run directory (`rollout/trajectories.jsonl`, latest record per episode, and `rollout/plans.json`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.artifacts.trajectories import import_summary, read_rollout_plans
from trace_rl.errors import UserError
from trace_rl.stats import GroupSummary, summarize


def load_summaries(
    run_dir: RunDir, *, k_max: int | None = None, samples: int = 1000, seed: int = 0
) -> list[GroupSummary]:
    store = JsonlStore(run_dir.trajectories)
    if not store.path.exists() and not run_dir.plans.exists():
        raise UserError(f"{run_dir.root} has no rollout trajectories (run `trace-rl rollout --run {run_dir.root}`)")
    plans = {key: plan.model_dump(mode="json") for key, plan in read_rollout_plans(run_dir).items()}
    return summarize(store.latest(), plans, k_max=k_max, samples=samples, seed=seed)


def _f(x: float, digits: int = 3) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 10_000 else str(n)


def render(summaries: list[GroupSummary], console: Console, *, title: str = "") -> None:
    """Three tables (episodes, pass^k, terminations) and the infrastructure-failure breakdown."""
    episodes = Table(title=f"Rollout {title}".strip(), title_justify="left")
    for col in ("env", "split", "tasks", "trials", "episodes", "scored", "infra", "missing", "success", "mean reward"):
        episodes.add_column(col, justify="left" if col in ("env", "split") else "right")
    episodes.add_column("tokens (prompt/completion)", justify="right")
    episodes.add_column("model / adapter")
    for s in summaries:
        success = f"{s.successes}/{s.scored} = {_f(s.success_rate)}" if s.scored else "-"
        episodes.add_row(
            s.env,
            s.split,
            str(s.tasks),
            str(s.trials),
            str(s.expected),
            str(s.scored),
            str(s.infra),
            str(s.missing),
            success,
            _f(s.mean_reward),
            f"{_tokens(s.prompt_tokens)}/{_tokens(s.completion_tokens)}",
            ", ".join(s.models) + (f" / {', '.join(s.adapters)}" if s.adapters else ""),
        )
    console.print(episodes)

    pass_k = Table(title="pass^k (mean over tasks of C(c,k)/C(n,k); 95% bootstrap CI over tasks)", title_justify="left")
    for col in ("env", "split", "k", "pass^k", "95% CI", "tasks with ≥k scored trials"):
        pass_k.add_column(col, justify="left" if col in ("env", "split") else "right")
    for s in summaries:
        for p in s.pass_k:
            pass_k.add_row(
                s.env, s.split, str(p.k), _f(p.value), f"[{_f(p.low)}, {_f(p.high)}]", f"{p.tasks}/{s.tasks}"
            )
    console.print(pass_k)

    terms = Table(title="termination reasons", title_justify="left")
    for col in ("env", "split", "reason", "episodes"):
        terms.add_column(col, justify="right" if col == "episodes" else "left")
    for s in summaries:
        for reason, n in s.terminations.most_common():
            terms.add_row(s.env, s.split, reason, str(n))
    console.print(terms)

    infra = [(s, kind, n) for s in summaries for kind, n in s.infra_kinds.most_common()]
    if infra:
        table = Table(
            title="infrastructure failures (not agent failures; rerun the rollout to retry)", title_justify="left"
        )
        for col in ("env", "split", "kind", "episodes"):
            table.add_column(col, justify="right" if col == "episodes" else "left")
        for s, kind, n in infra:
            table.add_row(s.env, s.split, kind, str(n))
        console.print(table)
    incomplete = sum(s.infra + s.missing for s in summaries)
    if incomplete:
        console.print(
            f"{incomplete} planned episode(s) have no score yet (infra failures or missing); pass^k and success rates "
            "above are over scored episodes only.",
            markup=False,
        )


def report(
    run_dir: RunDir,
    *,
    k_max: int | None = None,
    samples: int = 1000,
    seed: int = 0,
    as_json: bool = False,
    console: Console | None = None,
) -> list[GroupSummary]:
    summaries = load_summaries(run_dir, k_max=k_max, samples=samples, seed=seed)
    console = console or Console(width=None if Console().is_terminal else 160)
    if as_json:
        payload: dict[str, Any] = {"run": str(run_dir.root), "groups": [s.as_dict() for s in summaries]}
        console.print_json(json.dumps(payload))
    else:
        imported = import_summary(run_dir.manifest()) if run_dir.exists() else None
        if imported:  # a log read by `trace-rl import`: nothing was planned here, missing pairs mean nothing
            console.print(f"imported run: {imported.get('format')} log {imported.get('source')}", markup=False)
            summaries_shown = [replace(s, missing=0) for s in summaries]
        else:
            summaries_shown = summaries
        render(summaries_shown, console, title=str(run_dir.root))
    return summaries
