"""Rollout-budget accounting for the comparison (TRACE §4.1–4.2: "same total number of training iterations as the sum of
training all capabilities separately"; GEPA "strictly constrained to use the same total rollout budget").

One rollout = one episode. An adapter's budget is the number of training episodes it generated: the distinct
trajectory ids in `train/<name>/trajectories.jsonl` (re-sampled groups and dropped groups included: they were
generated), else, when trajectories were not logged, the nominal `steps × G × K` from its `train_config.json` and
`done.json`. Before/after evaluation episodes of the train stage are not training rollouts and are not counted.

- TRACE = the sum over the capability adapters;
- GRPO on target and the multi-capability adapter are trained for `round(total / (G·K))` steps with the adapters' own
  G and K, so their nominal budget matches; their actual count (re-sampling varies) is recorded next to it;
- single best adapter = that adapter's own budget (the paper's "a quarter of the steps" with four capabilities);
- GEPA = its metric calls (each one episode), capped at the total (`max_metric_calls` plus a hard cap in the adapter).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.artifacts.adapters import read_done, read_train_record
from trace_rl.artifacts.layout import AdapterLayout, TrainWorkLayout
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import training_rollouts_by_step


@dataclass
class AdapterBudget:
    """The training rollouts behind one adapter."""

    name: str
    rollouts: int
    source: str = field(metadata={"help": "trajectories | nominal | unknown"})
    steps: int | None = None
    group_size: int | None = None
    groups_per_step: int | None = None
    nominal: int | None = None
    by_step: dict[int, int] = field(default_factory=dict, metadata={"help": "Optimizer step -> rollouts for it."})

    def until(self, step: int) -> int:
        """Rollouts generated for the first `step` optimizer steps (nominal when not logged)."""
        if self.by_step:
            return sum(n for s, n in self.by_step.items() if s < step)
        if self.group_size and self.groups_per_step:
            return step * self.group_size * self.groups_per_step
        return 0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("by_step")
        return out


def adapter_budget(name: str, adapter_dir: Path, work_dir: Path) -> AdapterBudget:
    """The budget of the adapter in `adapter_dir`, trained with work folder `work_dir`."""
    adapter = AdapterLayout(adapter_dir)
    record, done = read_train_record(adapter), read_done(adapter)
    config = record.config if record else {}
    k = config.get("num_generations")
    g = config.get("groups_per_step")
    steps = done.steps if done is not None and done.steps is not None else config.get("max_steps")
    nominal = int(steps) * int(k) * int(g) if steps is not None and k and g else None
    by_step = training_rollouts_by_step(TrainWorkLayout(work_dir).trajectories)
    if by_step:
        rollouts, source = sum(by_step.values()), "trajectories"
    elif nominal is not None:
        rollouts, source = nominal, "nominal"
    else:
        rollouts, source = 0, "unknown"
    return AdapterBudget(
        name=name,
        rollouts=rollouts,
        source=source,
        steps=int(steps) if steps is not None else None,
        group_size=int(k) if k else None,
        groups_per_step=int(g) if g else None,
        nominal=nominal,
        by_step=by_step,
    )


def run_adapter_budget(run: RunDir, name: str) -> AdapterBudget:
    """Budget of `adapters/<name>/` trained in `train/<name>/` (the train stage's layout)."""
    return adapter_budget(name, run.adapter(name).folder, run.train_work(name).folder)


def matched_steps(total: int, group_size: int, groups_per_step: int) -> int:
    """Optimizer steps whose nominal rollouts (steps · G · K) come closest to `total` (at least one)."""
    per_step = max(1, group_size * groups_per_step)
    return max(1, round(total / per_step))


@dataclass
class Ledger:
    """The budget accounting of one evaluation, written to `evaluate/budget.json`."""

    unit: str = "rollouts (episodes)"
    trace_total: int | None = None
    trace_source: str = ""
    adapters: dict[str, dict[str, Any]] = field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    rules: list[str] = field(
        default_factory=lambda: [
            "one rollout = one episode (one task, one trial), training or GEPA evaluation alike",
            "TRACE = sum over the capability adapters of their training rollouts",
            "GRPO on target and multi-capability: round(total / (G*K)) steps with the adapters' G and K",
            "single best adapter: that adapter's own training rollouts",
            "GEPA: metric calls (= episodes), max_metric_calls = total, hard-capped in the adapter",
            "selection rollouts (single best, the held-in guard of TRACE guarded) and evaluation episodes are reported "
            "apart, not as training budget",
        ]
    )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


__all__ = [
    "AdapterBudget",
    "Ledger",
    "adapter_budget",
    "matched_steps",
    "run_adapter_budget",
]
