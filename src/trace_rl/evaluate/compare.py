"""pass^k per arm with bootstrap intervals over tasks, and paired differences to the base and from TRACE to every other
arm (docs/method-notes.md §6.2).

Every arm runs the same (task, trial) episodes with the same trial seeds, so arm and base are compared task by task:
for each k the per-task estimate is C(c, k)/C(n, k) (τ²-bench pass^k, `rollout.metrics`), the difference per task is
`arm − base` over the tasks both have ≥ k scored trials, and its interval is a percentile bootstrap that resamples
those tasks (the same resampled tasks for both arms). Unpaired intervals would add the task-to-task spread twice.
`trace_versus` takes the same paired difference `trace − arm` for each arm but base (GRPO on target, GEPA, …).

`log_comparison` files the comparison with the run's tracker (`run.report_to`): scalars `evaluate/<arm>/pass^k`,
`evaluate/<arm>/diff^k` (Δ to base), `evaluate/trace_minus_<arm>/diff^k` and `evaluate/<arm>/mean_reward`, and the
table `evaluate/comparison` (one row per arm and k).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trace_rl.artifacts.evaluation import ARM_LABELS, ArmDifference, ArmResult, Comparison, FamilyRow, PassKRow
from trace_rl.stats import GroupSummary, finite_or_none, pass_hat_k, quantile, summarize
from trace_rl.tracking import Tracker


@dataclass
class PairedDiff:
    """Mean of per-task differences `a − b` with a paired percentile-bootstrap interval."""

    value: float
    low: float
    high: float
    tasks: int

    def row(self, k: int) -> PassKRow:
        """This difference as a pass^k row of the comparison (NaN becomes null)."""
        return PassKRow(
            k=k,
            value=finite_or_none(self.value),
            low=finite_or_none(self.low),
            high=finite_or_none(self.high),
            tasks=self.tasks,
        )


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, samples: int = 1000, seed: int = 0, level: float = 0.95
) -> PairedDiff:
    """`a[i]` and `b[i]` belong to task i; tasks are resampled with replacement, both arms together."""
    if len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        return PairedDiff(math.nan, math.nan, math.nan, 0)
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    mean = sum(diffs) / n
    if n == 1 or samples <= 0:
        return PairedDiff(mean, mean, mean, n)
    rng = random.Random(seed)
    means = sorted(sum(diffs[i] for i in rng.choices(range(n), k=n)) / n for _ in range(samples))
    alpha = (1.0 - level) / 2
    return PairedDiff(mean, quantile(means, alpha), quantile(means, 1.0 - alpha), n)


def per_task_pass_k(group: GroupSummary, k: int) -> dict[str, float]:
    """task id -> pass^k estimate, for tasks with at least k scored trials."""
    return {o.task_id: pass_hat_k(o.scored, o.successes, k) for o in group.outcomes if o.scored >= k}


def diff_rows(
    arm: GroupSummary, base: GroupSummary, k_max: int, *, samples: int, seed: int, level: float
) -> list[PassKRow]:
    """Paired pass^k differences arm − base for k = 1..k_max."""
    rows = []
    for k in range(1, k_max + 1):
        mine, theirs = per_task_pass_k(arm, k), per_task_pass_k(base, k)
        common = [t for t in mine if t in theirs]
        d = paired_bootstrap(
            [mine[t] for t in common], [theirs[t] for t in common], samples=samples, seed=seed, level=level
        )
        rows.append(d.row(k))
    return rows


def trace_versus(
    groups: dict[str, GroupSummary], k_max: int, *, samples: int, seed: int, level: float
) -> list[ArmDifference]:
    """TRACE minus each other arm in `groups` (arm name -> summary) but base, paired as `diff_rows`; [] without
    TRACE."""
    trace = groups.get("trace")
    if trace is None:
        return []
    return [
        ArmDifference(arm=name, rows=diff_rows(trace, group, k_max, samples=samples, seed=seed, level=level))
        for name, group in groups.items()
        if name not in ("base", "trace")
    ]


def versus_table(differences: list[ArmDifference], k_max: int) -> str:
    """TRACE minus each other arm as a Markdown table (points, paired 95% intervals); "" when there is none."""
    if not differences:
        return ""
    ks = list(range(1, k_max + 1))
    head = ["TRACE minus", *[f"Δ pass^{k} (paired)" for k in ks], "Tasks"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in differences:
        first = d.at(1)
        cells = [ARM_LABELS.get(d.arm, d.arm), *[_interval(d.at(k), signed=True) for k in ks]]
        lines.append("| " + " | ".join([*cells, str(first.tasks if first else 0)]) + " |")
    return "\n".join(lines)


def family_rows(
    arm: GroupSummary,
    base: GroupSummary | None,
    families: dict[str, str],
    k_max: int,
    *,
    samples: int,
    seed: int,
    level: float,
) -> list[FamilyRow]:
    """pass^k per task family (`families`: task id -> family) with a bootstrap interval over the family's tasks, and
    the paired difference to the base on them (none for the base itself)."""
    rows = []
    for family in sorted(set(families.values())):
        pass_k, diffs = [], []
        tasks = 0
        for k in range(1, k_max + 1):
            mine = {t: v for t, v in per_task_pass_k(arm, k).items() if families.get(t) == family}
            tasks = max(tasks, len(mine))
            own = paired_bootstrap(list(mine.values()), [0.0] * len(mine), samples=samples, seed=seed, level=level)
            pass_k.append(own.row(k))
            if base is None or base is arm:
                continue
            theirs = per_task_pass_k(base, k)
            common = [t for t in mine if t in theirs]
            d = paired_bootstrap(
                [mine[t] for t in common], [theirs[t] for t in common], samples=samples, seed=seed, level=level
            )
            diffs.append(d.row(k))
        rows.append(FamilyRow(family=family, tasks=tasks, pass_k=pass_k, diff_to_base=diffs))
    return rows


def summarize_records(
    latest: dict[str, dict[str, Any]],
    env: str,
    split: str,
    task_ids: list[str],
    trials: int,
    *,
    samples: int,
    seed: int,
    level: float,
) -> GroupSummary:
    """pass^k (k ≤ trials) over the planned (task, trial) pairs of one arm's store; unplanned records are ignored."""
    plan = {f"{env}/{split}": {"env": env, "split": split, "task_ids": task_ids, "trials": trials}}
    groups = summarize(latest, plan, k_max=trials, samples=samples, seed=seed, level=level)
    return next(g for g in groups if g.env == env and g.split == split)


def arm_result(
    name: str,
    group: GroupSummary,
    base: GroupSummary | None,
    *,
    samples: int,
    seed: int,
    level: float,
    budget: int = 0,
    adapters: list[str] | None = None,
    description: str = "",
    details: dict[str, Any] | None = None,
    families: dict[str, str] | None = None,
) -> ArmResult:
    """An arm's row of `evaluate/comparison.json`."""
    pass_k = [
        PassKRow(
            k=p.k, value=finite_or_none(p.value), low=finite_or_none(p.low), high=finite_or_none(p.high), tasks=p.tasks
        )
        for p in group.pass_k
    ]
    diffs = (
        []
        if base is None or name == "base"
        else diff_rows(group, base, group.trials, samples=samples, seed=seed, level=level)
    )
    info = {
        "episodes": {
            "expected": group.expected,
            "scored": group.scored,
            "infra": group.infra,
            "missing": group.missing,
        },
        "success_rate": finite_or_none(group.success_rate),
        "terminations": dict(group.terminations),
        "tokens": {"prompt": group.prompt_tokens, "completion": group.completion_tokens, "calls": group.model_calls},
        **(details or {}),
    }
    return ArmResult(
        name=name,
        label=ARM_LABELS.get(name, name),
        description=description,
        pass_k=pass_k,
        diff_to_base=diffs,
        mean_reward=finite_or_none(group.mean_reward),
        episodes=group.scored,
        rollout_budget=max(0, int(budget)),
        adapters=list(adapters or []),
        by_family=family_rows(
            group,
            None if name == "base" else base,
            families or {},
            group.trials,
            samples=samples,
            seed=seed,
            level=level,
        ),
        details=info,
    )


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def _interval(row: PassKRow | None, signed: bool = False) -> str:
    if row is None or row.value is None:
        return "—"
    sign = "+" if signed and row.value >= 0 else ""
    if row.low is None or row.high is None:
        return f"{sign}{_pct(row.value)}"
    return f"{sign}{_pct(row.value)} [{_pct(row.low)}, {_pct(row.high)}]"


def markdown_table(arms: list[ArmResult], k_max: int, skipped: dict[str, str] | None = None) -> str:
    """The comparison as a Markdown table: pass^k (%) with 95% intervals, Δ vs base (paired), budget."""
    ks = list(range(1, k_max + 1))
    head = ["Arm", *[f"pass^{k} % [95% CI]" for k in ks], "Δ pass^1 vs base (paired)", "Training rollouts"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in arms:
        cells = [arm.display, *[_interval(arm.at(k)) for k in ks]]
        cells.append("—" if arm.name == "base" else _interval(arm.at(1, diff=True), signed=True))
        cells.append(str(arm.rollout_budget))
        lines.append("| " + " | ".join(cells) + " |")
    for name, reason in (skipped or {}).items():
        cells = [ARM_LABELS.get(name, name), *["skipped" for _ in ks], reason, "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family_table(arms: list[ArmResult]) -> str:
    """pass^1 (%) per task family and arm, with each arm's paired Δ to base on the family's tasks ("" without
    families)."""
    families = sorted({row.family for arm in arms for row in arm.by_family})
    if not families:
        return ""
    head = ["Family", "Tasks", *[f"{a.display} pass^1 %" for a in arms]]
    head += [f"Δ {a.display} vs base" for a in arms if a.name != "base"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for family in families:
        rows = {a.name: next((r for r in a.by_family if r.family == family), None) for a in arms}
        tasks = max((r.tasks for r in rows.values() if r is not None), default=0)
        cells = [family, str(tasks), *[_interval(r.at(1) if r else None) for r in rows.values()]]
        cells += [
            _interval(rows[a.name].at(1, diff=True) if rows[a.name] else None, True) for a in arms if a.name != "base"
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """One row per (arm, k): pass^k with its interval, the paired Δ to base, the arm's reward and budget."""
    rows = []
    for arm in comparison.arms:
        for row in arm.pass_k:
            diff = arm.at(row.k, diff=True)
            rows.append(
                {
                    "arm": arm.name,
                    "label": arm.display,
                    "k": row.k,
                    "pass_k": row.value,
                    "low": row.low,
                    "high": row.high,
                    "tasks": row.tasks,
                    "diff_to_base": diff.value if diff else None,
                    "diff_low": diff.low if diff else None,
                    "diff_high": diff.high if diff else None,
                    "mean_reward": arm.mean_reward,
                    "episodes": arm.episodes,
                    "rollout_budget": arm.rollout_budget,
                }
            )
    return rows


def log_comparison(tracker: Tracker, comparison: Comparison, step: int | None = None) -> None:
    """The comparison's figures and table to `tracker`, at one step (default 0)."""
    step = 0 if step is None else step
    metrics: dict[str, float] = {}
    for arm in comparison.arms:
        for row in arm.pass_k:
            if row.value is not None:
                metrics[f"evaluate/{arm.name}/pass^{row.k}"] = row.value
        for row in arm.diff_to_base:
            if row.value is not None:
                metrics[f"evaluate/{arm.name}/diff^{row.k}"] = row.value
        if arm.mean_reward is not None:
            metrics[f"evaluate/{arm.name}/mean_reward"] = arm.mean_reward
    for d in comparison.trace_versus:
        for row in d.rows:
            if row.value is not None:
                metrics[f"evaluate/trace_minus_{d.arm}/diff^{row.k}"] = row.value
    tracker.log(metrics, step=step)
    tracker.log_table("evaluate/comparison", comparison_rows(comparison), step=step)


__all__ = [
    "PairedDiff",
    "arm_result",
    "comparison_rows",
    "diff_rows",
    "family_rows",
    "family_table",
    "log_comparison",
    "markdown_table",
    "paired_bootstrap",
    "per_task_pass_k",
    "summarize_records",
    "trace_versus",
    "versus_table",
]
