"""The "targeted" table: is each capability adapter's gain on the target where its capability is needed, or spread
over (or taken from) the rest? For every adapter evaluated alone on the held-out tasks, its paired gain over base on
its *own* task families (the families of the train tasks its capability was diagnosed from, the environment's
evidence) against its gain on the *other* families, each with a paired bootstrap interval over those tasks.

TRACE (§4) reports per-capability gains on the tasks that need the capability; this table is our reading of it for a
target with task families. The per-adapter episodes are the single-best arm's with `select=test` (every adapter alone
on the test tasks; that arm then leaks and is reported as such), so the table costs no extra episodes there.
"""

from __future__ import annotations

from collections.abc import Mapping

from trace_rl.artifacts.environments import read_env_spec
from trace_rl.artifacts.evaluation import PassKRow, TargetedRow
from trace_rl.artifacts.store import RunDir
from trace_rl.evaluate.compare import paired_bootstrap, per_task_pass_k
from trace_rl.stats import GroupSummary


def own_families(run: RunDir, adapter: str, train_families: Mapping[str, str]) -> list[str]:
    """The families of the train tasks the adapter's capability environment was built from (its evidence)."""
    env = run.env(adapter)
    if not env.spec.exists():
        return []
    evidence = read_env_spec(env).evidence or {}
    return sorted({train_families[t] for t in evidence.get("task_ids", []) if t in train_families})


def _diff(mine: dict[str, float], base: dict[str, float], tasks: list[str], **boot: float | int) -> PassKRow:
    common = [t for t in tasks if t in mine and t in base]
    d = paired_bootstrap([mine[t] for t in common], [base[t] for t in common], **boot)  # type: ignore[arg-type]
    return d.row(1)


def targeted_rows(
    adapters: Mapping[str, GroupSummary],
    base: GroupSummary,
    families: Mapping[str, str],
    own: Mapping[str, list[str]],
    *,
    samples: int,
    seed: int,
    level: float,
) -> list[TargetedRow]:
    """One row per adapter with own families: pass^1 gain over base on them and on the held-out tasks of the rest."""
    theirs = per_task_pass_k(base, 1)
    rows = []
    for name, group in adapters.items():
        mine_families = set(own.get(name, []))
        if not mine_families:
            continue
        mine = per_task_pass_k(group, 1)
        inside = [t for t, f in families.items() if f in mine_families]
        outside = [t for t, f in families.items() if f not in mine_families]
        boot = {"samples": samples, "seed": seed, "level": level}
        rows.append(
            TargetedRow(
                adapter=name,
                own_families=sorted(mine_families),
                own=_diff(mine, theirs, inside, **boot),
                others=_diff(mine, theirs, outside, **boot),
            )
        )
    return rows


def targeted_markdown(rows: list[TargetedRow]) -> str:
    """The table for summary.md: Δ pass^1 (points) on the adapter's own families and on the others."""
    if not rows:
        return ""

    def cell(r: PassKRow) -> str:
        if r.value is None:
            return "–"
        return f"{100 * r.value:+.1f} [{100 * (r.low or 0):+.1f}, {100 * (r.high or 0):+.1f}] ({r.tasks} tasks)"

    lines = ["| adapter | own families | Δ own | Δ others |", "|---|---|---|---|"]
    lines += [f"| {r.adapter} | {', '.join(r.own_families)} | {cell(r.own)} | {cell(r.others)} |" for r in rows]
    return "\n".join(lines)


__all__ = ["own_families", "targeted_markdown", "targeted_rows"]
