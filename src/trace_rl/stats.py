"""Rollout metrics: pass^k with bootstrap confidence intervals over tasks, rewards, terminations, infra accounting.

pass^k follows τ²-bench: for a task with n scored trials of which c succeeded, the chance that k trials drawn without
replacement all succeed is C(c, k) / C(n, k); pass^k is its mean over tasks with n ≥ k. Confidence intervals
(docs/method-notes.md §6.2) resample tasks with replacement (percentile bootstrap, a fixed RNG seed so a report is
reproducible).

Accounting: an episode is *scored* (the agent succeeded or failed), an *infra* failure (server down, timeout after
retries, an internal error; retried on rerun, never an agent failure) or *missing* (planned, never finished). Every
planned episode is in exactly one of the three, so nothing leaves a denominator unseen.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): the chance that k of n trials, c of them successes, drawn without replacement all succeed."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    return math.comb(c, k) / math.comb(n, k)


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile of an ascending list (numpy's default method)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_ci(
    values: list[float], *, samples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (one value per task), resampling tasks."""
    if not values or samples <= 0:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[i] for i in rng.choices(range(n), k=n)) / n for _ in range(samples))
    alpha = (1.0 - level) / 2
    return quantile(means, alpha), quantile(means, 1.0 - alpha)


@dataclass
class PassK:
    k: int
    value: float
    low: float
    high: float
    tasks: int = field(metadata={"help": "Tasks with at least k scored trials (the mean is over these)."})


@dataclass
class TaskOutcome:
    """One task's trials: scored ones (with successes and rewards), infra failures, missing ones."""

    task_id: str
    successes: int = 0
    scored: int = 0
    rewards: list[float] = field(default_factory=list)
    infra: int = 0
    missing: int = 0


def pass_k_table(
    outcomes: Iterable[TaskOutcome], k_max: int, *, samples: int = 1000, seed: int = 0, level: float = 0.95
) -> list[PassK]:
    """pass^1..pass^k_max over the tasks with enough scored trials, each with a bootstrap interval over tasks."""
    outcomes = list(outcomes)
    rows = []
    for k in range(1, k_max + 1):
        values = [pass_hat_k(o.scored, o.successes, k) for o in outcomes if o.scored >= k]
        if not values:
            rows.append(PassK(k, math.nan, math.nan, math.nan, 0))
            continue
        low, high = bootstrap_ci(values, samples=samples, seed=seed, level=level)
        rows.append(PassK(k, sum(values) / len(values), low, high, len(values)))
    return rows


def infra_kind(message: str) -> str:
    """The kind of an infra error message: 'timeout', 'connection', 'http_5xx', 'internal', 'judge ...'."""
    head = message.split(":", 1)[0].strip()
    return head or "unknown"


@dataclass
class GroupSummary:
    """One environment and split of a rollout run."""

    env: str
    split: str
    tasks: int
    trials: int
    expected: int
    scored: int = 0
    successes: int = 0
    infra: int = 0
    missing: int = 0
    extra: int = 0
    mean_reward: float = math.nan
    pass_k: list[PassK] = field(default_factory=list)
    terminations: Counter[str] = field(default_factory=Counter)
    infra_kinds: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    models: list[str] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)
    outcomes: list[TaskOutcome] = field(default_factory=list)

    @property
    def success_rate(self) -> float:
        return self.successes / self.scored if self.scored else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {
            "env": self.env,
            "split": self.split,
            "tasks": self.tasks,
            "trials": self.trials,
            "episodes": {
                "expected": self.expected,
                "scored": self.scored,
                "infra": self.infra,
                "missing": self.missing,
                "unplanned": self.extra,
            },
            "successes": self.successes,
            "success_rate": finite_or_none(self.success_rate),
            "mean_reward": finite_or_none(self.mean_reward),
            "pass_k": {
                str(p.k): {
                    "value": finite_or_none(p.value),
                    "ci95": [finite_or_none(p.low), finite_or_none(p.high)],
                    "tasks": p.tasks,
                }
                for p in self.pass_k
            },
            "terminations": dict(self.terminations),
            "infra_kinds": dict(self.infra_kinds),
            "tokens": {"prompt": self.prompt_tokens, "completion": self.completion_tokens, "calls": self.model_calls},
            "models": self.models,
            "adapters": self.adapters,
        }


def finite_or_none(x: float | None) -> float | None:
    """x rounded for JSON, or None where it is missing or NaN."""
    return None if x is None or math.isnan(x) else round(x, 6)


def summarize(
    latest: dict[str, dict[str, Any]],
    plans: dict[str, dict[str, Any]] | None = None,
    *,
    k_max: int | None = None,
    samples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> list[GroupSummary]:
    """Per (env, split): counts, pass^k with intervals, rewards, terminations and tokens from the latest records.

    `plans` (plans.json) gives the expected (task, trial) pairs; without a plan a group's tasks and trials are those
    seen in the records. Records outside the plan (an older, larger plan) are counted as `unplanned` and left out.
    """
    plans = plans or {}
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in latest.values():
        by_group.setdefault((record["env"], record["split"]), []).append(record)
    for plan in plans.values():
        by_group.setdefault((plan["env"], plan["split"]), [])

    summaries = []
    for (env, split), records in sorted(by_group.items()):
        plan = plans.get(f"{env}/{split}")
        if plan is not None:
            task_ids, trials = list(plan["task_ids"]), int(plan["trials"])
        else:
            task_ids = list(dict.fromkeys(r["task_id"] for r in records))
            trials = max((int(r["trial"]) + 1 for r in records), default=0)
        group = GroupSummary(env=env, split=split, tasks=len(task_ids), trials=trials, expected=len(task_ids) * trials)
        outcomes = {t: TaskOutcome(task_id=t) for t in task_ids}
        seen: set[tuple[str, int]] = set()
        rewards: list[float] = []
        models: dict[str, None] = {}
        adapters: dict[str, None] = {}
        for r in records:
            outcome = outcomes.get(r["task_id"])
            if outcome is None or int(r["trial"]) >= trials:
                group.extra += 1
                continue
            seen.add((r["task_id"], int(r["trial"])))
            group.terminations[str(r.get("termination"))] += 1
            tokens = r.get("tokens") or {}
            group.prompt_tokens += int(tokens.get("prompt", 0))
            group.completion_tokens += int(tokens.get("completion", 0))
            group.model_calls += int(tokens.get("model_calls", 0))
            models[str(r.get("model"))] = None
            if r.get("adapter"):
                adapters[str(r["adapter"])] = None
            if r.get("infra_error") is not None:
                outcome.infra += 1
                group.infra += 1
                group.infra_kinds[infra_kind(r["infra_error"])] += 1
                continue
            outcome.scored += 1
            group.scored += 1
            reward = float(r.get("reward") or 0.0)
            outcome.rewards.append(reward)
            rewards.append(reward)
            if r.get("success"):
                outcome.successes += 1
                group.successes += 1
        for task_id, outcome in outcomes.items():
            outcome.missing = sum((task_id, t) not in seen for t in range(trials))
            group.missing += outcome.missing
        group.mean_reward = sum(rewards) / len(rewards) if rewards else math.nan
        group.outcomes = list(outcomes.values())
        group.pass_k = pass_k_table(
            group.outcomes, k_max if k_max is not None else trials, samples=samples, seed=seed, level=level
        )
        group.models, group.adapters = list(models), list(adapters)
        summaries.append(group)
    return summaries
