"""The evidence behind a capability: its failed train-split trajectories and their tasks.

Inputs: `diagnose/capabilities.json` (selected capabilities; `stats.example_failed_trajectory_ids` and
`stats.lacking_failed_runs` name the failed trajectories labelled LACKING; `example_task_ids` name tasks) and
`rollout/trajectories.jsonl`. Only train-split evidence is used: anything from another split is dropped and
reported, so no environment is ever derived from a test task (docs/method-notes.md §6.1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trace_rl.artifacts.layout import ROLLOUT_DIR, TRAJECTORIES_FILE
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.envs.base import Domain
from trace_rl.errors import UserError
from trace_rl.types import Capability, Task, Trajectory

TRAJECTORIES = f"{ROLLOUT_DIR}/{TRAJECTORIES_FILE}"


@dataclass
class Evidence:
    capability: Capability
    tasks: list[Task] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    @property
    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_ids": self.task_ids,
            "trajectory_ids": [t.id for t in self.trajectories],
            "dropped": self.dropped,
        }


def load_trajectories(run: RunDir) -> dict[str, Trajectory]:
    """The rollout trajectories by id (records that are not trajectories skipped)."""
    return read_trajectories(run.trajectories)[0]


def collect_evidence(
    capability: Capability,
    trajectories: dict[str, Trajectory],
    target: Domain,
    *,
    split: str = "train",
) -> Evidence:
    """The failed `split` trajectories attributed to the capability, and their tasks (in the target's `split`)."""
    ev = Evidence(capability)
    stats = capability.stats or {}
    wanted: list[str] = list(stats.get("example_failed_trajectory_ids") or [])
    wanted += [t for t in (stats.get("lacking_failed_runs") or {}) if t not in wanted]
    by_task: dict[str, list[Trajectory]] = {}
    for traj in trajectories.values():
        by_task.setdefault(traj.task_id, []).append(traj)
    for task_id in capability.example_task_ids:
        for traj in by_task.get(task_id, []):
            if traj.success is False and traj.id not in wanted:
                wanted.append(traj.id)
    try:
        split_tasks = {t.id: t for t in target.tasks(split)}
    except UserError:
        split_tasks = {}
    seen_tasks: set[str] = set()
    for tid in wanted:
        traj = trajectories.get(tid)
        if traj is None:
            ev.dropped.append(f"{tid}: not in {TRAJECTORIES}")
            continue
        if traj.split != split or traj.task_id not in split_tasks:
            ev.dropped.append(f"{tid}: split '{traj.split}' is not '{split}' (never used: test-set leakage)")
            continue
        ev.trajectories.append(traj)
        if traj.task_id not in seen_tasks:
            seen_tasks.add(traj.task_id)
            ev.tasks.append(split_tasks[traj.task_id])
    if not ev.trajectories:  # no rollouts on disk: fall back on the example task ids that are train tasks
        for task_id in capability.example_task_ids:
            if task_id in split_tasks and task_id not in seen_tasks:
                seen_tasks.add(task_id)
                ev.tasks.append(split_tasks[task_id])
            elif task_id not in split_tasks:
                ev.dropped.append(f"task {task_id}: not a '{split}' task")
    return ev


def summarize_trajectory(traj: Trajectory, *, max_chars: int = 1800) -> str:
    """A compact transcript for an author prompt: text turns, tool calls and short results."""
    lines: list[str] = [f"# {traj.id} (reward {traj.reward}, termination {traj.termination})"]
    for m in traj.messages:
        if m.role == "tool":
            lines.append(f"  tool -> {(m.content or '')[:160]}")
        elif m.tool_calls:
            for c in m.tool_calls:
                lines.append(f"  {m.role} calls {c.name}({c.arguments})")
        elif m.content:
            lines.append(f"  {m.role}: {m.content[:200]}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 20] + "\n  … (cut)"


__all__ = ["Evidence", "collect_evidence", "load_trajectories"]
