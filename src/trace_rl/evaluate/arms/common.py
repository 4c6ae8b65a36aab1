"""What every arm shares: its signature (`ArmFunction`, returning the `ArmEntry` recorded in `evaluate/arms.json`,
with its score-vs-budget `CurveEntry` points), the claim on the file it plays into (`claim`: two different agents never
mix in one file), and the evaluation of a single adapter (`adapter_arm`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.adapters import read_done
from trace_rl.artifacts.environments import env_states
from trace_rl.artifacts.evaluation import ArmEntry, read_episode_claims, write_episode_claims
from trace_rl.artifacts.layout import ENVS_DIR, STATUS_FILE, AdapterLayout, EvaluateLayout, RunLayout
from trace_rl.errors import UserError
from trace_rl.evaluate.budget import AdapterBudget
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext

ArmFunction = Callable[[EvalContext], ArmEntry]


def claim(ctx: EvalContext, relpath: str, identity: dict[str, Any], *, shared: bool = False) -> None:
    """Record who plays into `relpath` (of the shared `evaluate/` with `shared`); refuse to mix two agents in one
    file (rerun with the same settings to resume, or delete the file to redo the arm)."""
    folder = ctx.folder(shared)
    plans = read_episode_claims(folder)
    old = plans.get(relpath)
    if old is not None and old != identity:
        changed = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
        details = "; ".join(f"{k}: {old.get(k)!r} -> {identity.get(k)!r}" for k in changed[:4])
        raise UserError(
            f"{ctx.path(relpath, shared=shared)} holds episodes of a different setup ({details}); rerun with the same "
            "settings to resume, or delete that file to evaluate the new one"
        )
    plans[relpath] = identity
    write_episode_claims(folder, plans)


def adapter_stamp(path: Path) -> str | None:
    """An adapter folder's identity: its done.json's finish time, else the weights' mtime."""
    adapter = AdapterLayout(path)
    done = read_done(adapter)
    if done is not None:
        return str(done.finished_at)
    return str(adapter.weights.stat().st_mtime_ns) if adapter.weights.exists() else None


def why_no_adapters(run: RunLayout) -> str:
    """Why a run has no adapters: its environments all failed calibration, or `train` has not run."""
    statuses = [status for _, status in env_states(run) if status is not None]
    if statuses and "ready" not in statuses:
        where = f"{ENVS_DIR}/*/{STATUS_FILE}"
        return f"none of the {len(statuses)} capability environments passed calibration ({where})"
    return "run `trace-rl train`"


def need_budget(ctx: EvalContext) -> int:
    """The rollout budget to match (the sum over the capability adapters, or `--budget`); skips the arm if none."""
    if ctx.total_budget is None or ctx.total_budget <= 0:
        raise ArmSkipped("no rollout budget to match: no trained capability adapters and no --budget")
    return ctx.total_budget


def adapter_arm(
    ctx: EvalContext,
    name: str,
    adapter: str,
    folder: Path,
    budget: AdapterBudget,
    desc: str,
    details: dict[str, Any],
) -> ArmEntry:
    """Arm `name`: one adapter for every task, evaluated into the arm's file."""
    ctx.ensure_adapter(adapter, folder)
    relpath = EvaluateLayout.arm(name)
    claim(ctx, relpath, ctx.identity(arm=name, adapter=adapter, adapter_stamp=adapter_stamp(folder)))
    ctx.evaluate(name, relpath, adapter=adapter, metadata={"arm": name})
    return ArmEntry(
        name=name,
        relpath=relpath,
        budget=budget.rollouts,
        adapters=[adapter],
        description=desc,
        details={"budget": budget.as_dict(), **details},
    )


__all__ = [
    "ArmFunction",
    "adapter_arm",
    "adapter_stamp",
    "claim",
    "need_budget",
    "why_no_adapters",
]
