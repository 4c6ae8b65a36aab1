"""Rendering `diagnose/capabilities.json`: a plain dict (for the HTML report) and a rich table (for the terminal).

Each row: name, status, definition, mean ± std of Δ and Cov, runs passed of N (K needed), and the example failed
trajectory ids (the evidence; the HTML report turns them into links to its trajectory viewer).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from trace_rl.artifacts.capabilities import CapabilitiesFile, read_capabilities
from trace_rl.artifacts.store import RunDir
from trace_rl.types import Capability


def _row(cap: Capability) -> dict[str, Any]:
    s = cap.stats
    return {
        "name": cap.name,
        "status": cap.status,
        "selected": cap.status == "pending",
        "definition": cap.definition,
        "delta_mean": s.get("delta_mean"),
        "delta_std": s.get("delta_std"),
        "cov_mean": s.get("cov_mean"),
        "cov_std": s.get("cov_std"),
        "er_pos_mean": s.get("er_pos_mean"),
        "er_neg_mean": s.get("er_neg_mean"),
        "runs_passed": s.get("runs_passed"),
        "n_runs": s.get("n_runs"),
        "k": s.get("k"),
        "example_trajectory_ids": list(s.get("example_failed_trajectory_ids", [])),
        "example_task_ids": list(cap.example_task_ids),
    }


def capabilities_dict(data: CapabilitiesFile, *, include_rejected: bool = True) -> dict[str, Any]:
    """A JSON-ready summary of the selection: parameters, counts, rows (selected first, in rank order), warnings."""
    rows = [_row(c) for c in data.candidates if include_rejected or c.status == "pending"]
    rows.sort(key=lambda r: not r["selected"])  # stable: keeps the mean-Δ rank within each group
    return {
        "analyst": data.analyst,
        "params": data.params.model_dump(),
        "splits": list(data.splits),
        "n_trajectories": data.n_trajectories,
        "selected": [c.name for c in data.selected],
        "rows": rows,
        "warnings": list(data.warnings),
    }


def _pm(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:+.2f} ± {std or 0.0:.2f}" if std else f"{mean:+.2f}"


def _cov(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.2f} ± {std or 0.0:.2f}" if std else f"{mean:.2f}"


def capabilities_table(data: CapabilitiesFile | dict[str, Any], *, max_examples: int = 3) -> Table:
    """The rich table `trace-rl report` prints."""
    view = data if isinstance(data, dict) else capabilities_dict(data)
    p = view["params"]
    n = view["n_trajectories"]
    table = Table(
        title=f"Capabilities ({view['analyst']}; ρ={p['rho']:.2f}, δ={p['delta']:.2f}, K={p['k']} of N={p['n_runs']})",
        caption=f"{n.get('diagnosed', '?')} trajectories ({n.get('failed', '?')} failed) from split(s) "
        f"{', '.join(view['splits'])}",
    )
    table.add_column("", no_wrap=True)
    table.add_column("capability", style="bold")
    table.add_column("Δ mean", justify="right")
    table.add_column("Cov mean", justify="right")
    table.add_column("runs passed", justify="right")
    table.add_column("example failed trajectories")
    for row in view["rows"]:
        examples = row["example_trajectory_ids"]
        shown = ", ".join(examples[:max_examples]) + (
            f" (+{len(examples) - max_examples})" if len(examples) > max_examples else ""
        )
        table.add_row(
            "✓" if row["selected"] else "·",
            row["name"],
            _pm(row["delta_mean"], row["delta_std"]),
            _cov(row["cov_mean"], row["cov_std"]),
            f"{row['runs_passed']}/{row['n_runs']}",
            shown or "-",
            style=None if row["selected"] else "dim",
        )
    return table


def render(data: CapabilitiesFile, console: Console | None = None, *, warnings: bool = True) -> None:
    """Print the table (and the warnings) to `console`."""
    console = console or Console()
    parts: list[Any] = [capabilities_table(data)]
    if warnings and data.warnings:
        parts.append(Text("\n".join(f"warning: {w}" for w in data.warnings), style="yellow"))
    console.print(Group(*parts))


def run_capabilities_dict(run: RunDir) -> dict[str, Any]:
    """`capabilities_dict` of a run directory (raises UserError when the stage has not run)."""
    return capabilities_dict(read_capabilities(run))


__all__ = ["capabilities_dict", "capabilities_table", "render", "run_capabilities_dict"]
