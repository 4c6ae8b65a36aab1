"""ToolSandbox's result table for trace-rl trajectories: perfect scores (similarity 1.0) as a count, mean similarity,
pass^k, and the same per scenario category (a scenario counts in each of its categories, as ToolSandbox's own
per-category averages do), beside a reference column such as the do-nothing floor.

Episodes that ended on an infrastructure failure are not results: they are counted apart (`unscored`) and left out of
every mean. A task with fewer trials than k has no pass^k.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trace_rl.types import Task, TerminationReason, Trajectory

PERFECT = 1.0 - 1e-9


@dataclass
class Cell:
    """One row of the table: tasks, episodes, perfect episodes, mean similarity, pass^k."""

    tasks: int = 0
    episodes: int = 0
    perfect: int = 0
    mean_similarity: float = 0.0
    pass_k: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "tasks": self.tasks,
            "episodes": self.episodes,
            "perfect": self.perfect,
            "mean_similarity": round(self.mean_similarity, 4),
            **{f"pass^{k}": round(v, 4) for k, v in sorted(self.pass_k.items())},
        }


@dataclass
class Scoreboard:
    overall: Cell
    categories: dict[str, Cell]
    unscored: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "overall": self.overall.as_dict(),
            "categories": {k: v.as_dict() for k, v in sorted(self.categories.items())},
            "unscored": self.unscored,
        }


def _cell(similarities: Mapping[str, list[float]], ks: Iterable[int]) -> Cell:
    values = [s for per_task in similarities.values() for s in per_task]
    cell = Cell(tasks=len(similarities), episodes=len(values), perfect=sum(s >= PERFECT for s in values))
    cell.mean_similarity = sum(values) / len(values) if values else 0.0
    for k in ks:
        eligible = [per_task[:k] for per_task in similarities.values() if len(per_task) >= k]
        if eligible:
            cell.pass_k[k] = sum(all(s >= PERFECT for s in trials) for trials in eligible) / len(eligible)
    return cell


def scoreboard(trajectories: Iterable[Trajectory], tasks: Iterable[Task], *, ks: Iterable[int] = (1,)) -> Scoreboard:
    """The table over the latest scored trajectory of each (task, trial); trajectories of other tasks are ignored."""
    by_id = {t.id: t for t in tasks}
    latest: dict[tuple[str, int], Trajectory] = {}
    for traj in trajectories:
        if traj.task_id in by_id:
            latest[(traj.task_id, traj.trial)] = traj
    per_task: dict[str, list[float]] = defaultdict(list)
    unscored = 0
    for (task_id, _trial), traj in sorted(latest.items()):
        if traj.termination == TerminationReason.INFRA_ERROR or traj.reward is None:
            unscored += 1
            continue
        per_task[task_id].append(float(traj.reward))
    ks = sorted(set(ks))
    by_category: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for task_id, values in per_task.items():
        for category in by_id[task_id].metadata.get("categories", []):
            by_category[category][task_id] = values
    return Scoreboard(
        overall=_cell(per_task, ks),
        categories={c: _cell(v, ks) for c, v in by_category.items()},
        unscored=unscored,
    )


def markdown_table(columns: Mapping[str, Scoreboard]) -> str:
    """Perfect / episodes and mean similarity per category, one column pair per scoreboard (e.g. agent, floor)."""
    names = list(columns)
    categories = sorted({c for board in columns.values() for c in board.categories})
    head = "| | " + " | ".join(f"{n}: perfect | {n}: mean sim." for n in names) + " |"
    rule = "|---|" + "---:|---:|" * len(names)

    def row(label: str, cells: list[Cell | None]) -> str:
        parts = [f"{c.perfect}/{c.episodes} | {c.mean_similarity:.3f}" if c else "– | –" for c in cells]
        return f"| {label} | " + " | ".join(parts) + " |"

    lines = [head, rule, row("all", [b.overall for b in columns.values()])]
    lines += [row(c, [b.categories.get(c) for b in columns.values()]) for c in categories]
    return "\n".join(lines)


__all__ = ["Cell", "Scoreboard", "markdown_table", "scoreboard"]
