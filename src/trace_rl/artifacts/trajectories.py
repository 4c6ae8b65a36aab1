"""Trajectory stores and the rollout plan file.

- `rollout/trajectories.jsonl` (and every other episode store: calibration, training, evaluation, oracle): one
  `Trajectory` per line, the last record of an id wins. `read_trajectories` validates each latest record and counts
  the ones that are not trajectories (a reader decides whether that is fatal: diagnose reports them, others skip).
- `rollout/plans.json` (`RolloutPlan` per `<env>/<split>`): every (task, trial) pair ever asked for and who rolls it
  out, so reports count missing pairs and a rerun by another agent is refused (engine/plan.py keeps the rules).
- Training stores (`train/<capability>/trajectories.jsonl`) carry ids `<env>/train/step<N>/call<C>/g<G>/<k>`;
  `training_rollouts_by_step` counts them by optimizer step from the ids alone (lines hold token ids and are large).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from trace_rl.artifacts.layout import RunLayout
from trace_rl.artifacts.store import JsonlStore, atomic_write_json, read_json
from trace_rl.errors import UserError, first_problem
from trace_rl.types import Record, Task, Trajectory

_ID = re.compile(rb'"id":\s*"([^"]+)"')
_STEP = re.compile(r"/step(\d+)/")


def read_trajectories(path: Path) -> tuple[dict[str, Trajectory], int]:
    """(id -> latest trajectory, how many latest records are not valid trajectories) of an episode store."""
    out: dict[str, Trajectory] = {}
    invalid = 0
    for key, record in JsonlStore(path).latest().items():
        try:
            out[key] = Trajectory.model_validate(record)
        except ValidationError:
            invalid += 1
    return out, invalid


def first_success(path: Path) -> Trajectory | None:
    """The first successful trajectory of an episode store, in file order (records that do not validate skipped)."""
    if not path.exists():
        return None
    for record in JsonlStore(path).records():
        if not record.get("success"):
            continue
        try:
            return Trajectory.model_validate(record)
        except ValidationError:
            continue
    return None


def training_rollouts_by_step(path: Path) -> dict[int, int]:
    """Optimizer step -> distinct training trajectories logged for it (reads only each line's id)."""
    if not path.exists():
        return {}
    seen: set[bytes] = set()
    by_step: dict[int, int] = {}
    with path.open("rb") as fh:
        for line in fh:
            match = _ID.search(line[:400])
            if match is None or match.group(1) in seen:
                continue
            seen.add(match.group(1))
            step = _STEP.search(match.group(1).decode(errors="replace"))
            key = int(step.group(1)) if step else 0
            by_step[key] = by_step.get(key, 0) + 1
    return by_step


# -- rollout/plans.json ----------------------------------------------------------------------------------------------


class RolloutPlan(Record):
    """The (task, trial) pairs of one `<env>/<split>` and who rolls them out."""

    env: str
    split: str
    task_ids: list[str] = Field(default_factory=list)
    trials: int = Field(0, ge=0)
    seed: int = 0
    trial_seeds: list[int] = Field(default_factory=list)
    identity: dict[str, Any] = Field(default_factory=dict, description="Policy, adapter, user, seed and sampling.")
    updated_at: float = 0.0


def read_rollout_plans(run: RunLayout) -> dict[str, RolloutPlan]:
    """`<env>/<split>` -> plan; empty when no rollout has been planned."""
    if not run.plans.exists():
        return {}
    data = read_json(run.plans)
    if not isinstance(data, dict):
        raise UserError(f"{run.plans} is not a valid plan file: not a JSON object")
    plans = {}
    for key, plan in data.items():
        try:
            plans[key] = RolloutPlan.model_validate(plan)
        except ValidationError as exc:
            raise UserError(f"{run.plans} is not a valid plan file: {key}.{first_problem(exc)}") from None
    return plans


def write_rollout_plans(run: RunLayout, plans: dict[str, RolloutPlan]) -> None:
    atomic_write_json(run.plans, {key: plan.model_dump(mode="json") for key, plan in plans.items()})


# -- rollout/reference_tasks.json and the import marker (imported runs) ----------------------------------------------
IMPORT_STAGE = "import"
"""The manifest's stage record of `trace-rl import`: its presence marks a run whose episodes came from a log file."""


class ReferenceTasks(Record):
    """`rollout/reference_tasks.json`: the tasks an imported log was scored against (its gold actions are the
    reference diagnose compares with), for one environment."""

    env: str
    task_set: str | None = Field(None, description="The environment's task set the tasks were checked against.")
    source: str = Field("", description="The imported file.")
    tasks: list[Task] = Field(default_factory=list)


def write_reference_tasks(run: RunLayout, data: ReferenceTasks) -> None:
    atomic_write_json(run.reference_tasks, data)


def read_reference_tasks(run: RunLayout) -> ReferenceTasks | None:
    """The imported run's reference tasks; None for a run that was rolled out here."""
    if not run.reference_tasks.exists():
        return None
    data = read_json(run.reference_tasks)
    try:
        return ReferenceTasks.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{run.reference_tasks} is not a valid reference-task file: {first_problem(exc)}") from None


def import_summary(manifest: Any) -> dict[str, Any] | None:
    """The summary of the run's `import` stage record (source, format, models, counts); None when not imported."""
    record = manifest.stages.get(IMPORT_STAGE) if manifest is not None else None
    return dict(record.summary) if record is not None else None


__all__ = [
    "IMPORT_STAGE",
    "ReferenceTasks",
    "RolloutPlan",
    "first_success",
    "import_summary",
    "read_reference_tasks",
    "read_rollout_plans",
    "read_trajectories",
    "training_rollouts_by_step",
    "write_reference_tasks",
    "write_rollout_plans",
]
