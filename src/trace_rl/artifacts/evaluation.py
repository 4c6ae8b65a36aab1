"""The files the report reads from the route and evaluate stages, as pydantic models both sides share.

- `route/accuracy.json` (`RoutingAccuracy`): how well the router picks adapters on held-out tasks — the confusion
  matrix over the router's option names (capabilities and "base"; rows = truth, columns = prediction), accuracy with a
  bootstrap interval, how often base wins, the "potential rate" (predicted adapter among those that solve the task),
  and routed vs oracle-routed pass^1 (docs/method-notes.md §6.3: the paper reports none of these).
- `evaluate/comparison.json` (`Comparison`): per arm (base, trace, grpo_target, gepa, single_best,
  multi_capability, or any other name) pass^1..pass^k with bootstrap intervals over tasks, the paired difference to
  base with its interval, the rollout budget the arm consumed, plus score-vs-budget points for the paper's Fig. 4.

Also evaluate's own resume state: `evaluate/arms.json` (`ArmIndex`) and `evaluate/plans.json` (episode claims).

Producers build these models and save them with `save`; the report loads them with `load`. Unknown keys are errors so a
drifted producer is caught at once; free-form additions go in `details`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trace_rl.artifacts.layout import EvaluateLayout
from trace_rl.artifacts.store import atomic_write_json, read_json, read_model
from trace_rl.errors import UserError

KNOWN_ARMS = ("base", "trace", "trace_guarded", "grpo_target", "gepa", "single_best", "multi_capability")
ARM_LABELS = {
    "base": "Base model",
    "trace": "TRACE (routed adapters)",
    "trace_guarded": "TRACE, held-in guard",
    "grpo_target": "GRPO on target",
    "gepa": "GEPA (prompt optimisation)",
    "single_best": "Best single adapter",
    "multi_capability": "Multi-capability adapter",
}


class Schema(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def save(self, path: Path) -> Path:
        atomic_write_json(path, self)
        return path

    @classmethod
    def load(cls, path: Path) -> Any:
        return read_model(path, cls, f"{cls.__name__} file")


class Estimate(Schema):
    """A number with its confidence interval (None bounds: not computed)."""

    value: float | None = Field(description="The point estimate; None when there was nothing to estimate from.")
    low: float | None = None
    high: float | None = None


class PassKRow(Schema):
    """pass^k (or a difference of pass^k) for one k, with a bootstrap interval over tasks."""

    k: int = Field(ge=1)
    value: float | None
    low: float | None = None
    high: float | None = None
    tasks: int = Field(0, description="Tasks the mean is over (tasks with ≥ k scored trials; paired tasks for Δ).")


# -- route/accuracy.json ---------------------------------------------------------------------------------------------


class RoutedTask(Schema):
    """One held-out task's routing."""

    task_id: str
    truth: str | None = Field(None, description="The right option (capability or 'base'); None when unknown.")
    predicted: str
    scores: dict[str, float] = Field(default_factory=dict, description="label or name -> router score.")
    solved_by: list[str] | None = Field(
        None, description="Options (adapters, 'base') that solve the task, if measured."
    )


class RoutingAccuracy(Schema):
    """`route/accuracy.json`."""

    format: Literal["trace-rl/route-accuracy@1"] = "trace-rl/route-accuracy@1"
    env: str = Field("", description="Environment the tasks came from.")
    split: str = Field("", description="Split of the tasks (held out from routing-prompt examples).")
    truth: str = Field(description="What the true label is, e.g. 'capability environment of the task', 'oracle'.")
    labels: list[str] = Field(description="Option names in matrix order (capabilities, then 'base').")
    confusion: list[list[int]] = Field(description="confusion[i][j]: tasks whose truth is labels[i], routed to [j].")
    accuracy: Estimate
    n_tasks: int = Field(ge=0)
    base_rate: float | None = Field(None, description="Share of tasks routed to base.")
    potential_rate: float | None = Field(None, description="Share whose predicted option is among those that solve it.")
    routed_pass1: Estimate | None = Field(None, description="pass^1 when following the router.")
    oracle_pass1: Estimate | None = Field(None, description="pass^1 with the best option per task (an upper bound).")
    per_task: list[RoutedTask] = Field(default_factory=list)
    router: dict[str, Any] = Field(default_factory=dict, description="Router identity: base model, prompt, labels.")
    created_at: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _square(self) -> RoutingAccuracy:
        n = len(self.labels)
        if len(self.confusion) != n or any(len(row) != n for row in self.confusion):
            raise ValueError(f"confusion must be {n}x{n} (one row and column per label)")
        return self


# -- evaluate/comparison.json ----------------------------------------------------------------------------------------


class FamilyRow(Schema):
    """An arm's pass^k on the held-out tasks of one task family, and its paired difference to the base there."""

    family: str
    tasks: int = Field(ge=0)
    pass_k: list[PassKRow] = Field(default_factory=list)
    diff_to_base: list[PassKRow] = Field(default_factory=list)

    def at(self, k: int, diff: bool = False) -> PassKRow | None:
        return next((r for r in (self.diff_to_base if diff else self.pass_k) if r.k == k), None)


class TargetedRow(Schema):
    """One adapter alone on the held-out tasks: its paired pass^1 gain over base on its own task families (those of
    its environment's evidence tasks) and on the other families (evaluate/targeted.py)."""

    adapter: str
    own_families: list[str]
    own: PassKRow
    others: PassKRow


class ArmResult(Schema):
    """One arm of the comparison, evaluated on the same held-out tasks and seeds as every other arm."""

    name: str = Field(description=f"Arm id; the paper's are {', '.join(KNOWN_ARMS)}.")
    label: str = Field("", description="Display name; default from the arm id.")
    description: str = ""
    pass_k: list[PassKRow] = Field(description="pass^1..pass^k with 95% bootstrap intervals over tasks.")
    diff_to_base: list[PassKRow] = Field(
        default_factory=list, description="Paired difference to base per k (same tasks and seeds), with intervals."
    )
    mean_reward: float | None = None
    episodes: int = 0
    rollout_budget: int = Field(0, ge=0, description="Rollouts the arm consumed to be built (0 for base).")
    adapters: list[str] = Field(default_factory=list)
    by_family: list[FamilyRow] = Field(
        default_factory=list,
        description="The same figures per task family (`task.metadata.family`), if tasks have one.",
    )
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def display(self) -> str:
        return self.label or ARM_LABELS.get(self.name, self.name)

    def at(self, k: int, diff: bool = False) -> PassKRow | None:
        return next((r for r in (self.diff_to_base if diff else self.pass_k) if r.k == k), None)


class BudgetPoint(Schema):
    """One point of score vs rollout budget (TRACE Fig. 4)."""

    arm: str
    budget: int = Field(ge=0, description="Rollouts consumed.")
    value: float
    low: float | None = None
    high: float | None = None
    series: str = Field(
        "",
        description="Which of an arm's curves the point is on (TRACE: 'capability prefixes' or 'checkpoints'); empty: "
        "every curve of the arm (its budget-0 point and its own point).",
    )


class ArmDifference(Schema):
    """TRACE against one other arm on the same tasks and trial seeds: `trace − arm` per k, paired over tasks (the
    paper's claims are TRACE over GRPO on target and over GEPA, not only over base)."""

    arm: str
    rows: list[PassKRow] = Field(description="pass^k of TRACE minus pass^k of `arm`, per k, with intervals.")

    def at(self, k: int) -> PassKRow | None:
        return next((r for r in self.rows if r.k == k), None)


class Comparison(Schema):
    """`evaluate/comparison.json`."""

    format: Literal["trace-rl/comparison@1"] = "trace-rl/comparison@1"
    env: str
    split: str
    tasks: int = Field(ge=0)
    trials: int = Field(ge=1)
    metric: str = Field("pass^1", description="What budget_curve values are.")
    level: float = Field(0.95, description="Confidence level of every interval.")
    bootstrap_samples: int = 1000
    budget_unit: str = Field("rollouts", description="What a unit of rollout_budget / budget is.")
    arms: list[ArmResult]
    budget_curve: list[BudgetPoint] = Field(default_factory=list)
    targeted: list[TargetedRow] = Field(
        default_factory=list, description="Each adapter's gain on its own families against the others (select=test)."
    )
    trace_versus: list[ArmDifference] = Field(
        default_factory=list, description="TRACE minus each other arm but base (paired), when TRACE was evaluated."
    )
    notes: list[str] = Field(default_factory=list)
    created_at: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)

    def arm(self, name: str) -> ArmResult | None:
        return next((a for a in self.arms if a.name == name), None)

    @property
    def k_max(self) -> int:
        return max((r.k for a in self.arms for r in a.pass_k), default=1)


# -- evaluate/arms.json and evaluate/plans.json (evaluate's own resume state) ---------------------------------------


class CurveEntry(Schema):
    """One score-vs-budget point an arm evaluated: the agent of `arm` after `budget` rollouts, in `relpath`."""

    arm: str
    budget: int
    relpath: str
    trials: int
    label: str = ""
    series: str = ""


class ArmEntry(Schema):
    """What one evaluated arm consumed and where its episodes are (relative to evaluate/)."""

    name: str
    relpath: str
    budget: int = 0
    adapters: list[str] = Field(default_factory=list)
    description: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    curve: list[CurveEntry] = Field(default_factory=list)


class ArmIndex(Schema):
    """`evaluate/arms.json`: every arm evaluated so far (kept across invocations) and why the others were skipped."""

    arms: dict[str, ArmEntry] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict)


def read_arm_index(evaluate: EvaluateLayout) -> ArmIndex:
    """The arm index, empty when evaluate has not recorded an arm yet."""
    return ArmIndex.load(evaluate.arm_index) if evaluate.arm_index.exists() else ArmIndex()


def write_arm_index(evaluate: EvaluateLayout, index: ArmIndex) -> None:
    index.save(evaluate.arm_index)


def read_episode_claims(evaluate: EvaluateLayout) -> dict[str, dict[str, Any]]:
    """`evaluate/plans.json`: episode file (relative to evaluate/) -> the identity of the agent that plays into it."""
    if not evaluate.plans.exists():
        return {}
    data = read_json(evaluate.plans)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{evaluate.plans} is not a valid plan file: not an object of objects")
    return data


def write_episode_claims(evaluate: EvaluateLayout, claims: dict[str, dict[str, Any]]) -> None:
    atomic_write_json(evaluate.plans, claims)


__all__ = [
    "ARM_LABELS",
    "KNOWN_ARMS",
    "ArmDifference",
    "ArmEntry",
    "ArmIndex",
    "ArmResult",
    "BudgetPoint",
    "Comparison",
    "CurveEntry",
    "Estimate",
    "PassKRow",
    "RoutedTask",
    "RoutingAccuracy",
    "TargetedRow",
    "read_arm_index",
    "read_episode_claims",
    "write_arm_index",
    "write_episode_claims",
]
