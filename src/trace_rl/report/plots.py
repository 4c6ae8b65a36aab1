"""The report's figures, as PNG bytes: matplotlib's object API on the Agg canvas (no pyplot, no global backend).

Every function takes plain data and returns a PNG; `data_uri` turns it into an `<img src>` that needs no file.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import Any

from trace_rl.artifacts.evaluation import ARM_LABELS, BudgetPoint

COLORS = {
    "trace": "#1b7f3b",
    "grpo_target": "#c0392b",
    "gepa": "#2c6fbb",
    "base": "#555555",
    "single_best": "#8e44ad",
    "multi_capability": "#d68910",
}
FALLBACK_COLORS = ("#16a085", "#7f8c8d", "#e67e22", "#2980b9", "#c2185b")


def _figure(width: float = 6.0, height: float = 3.4) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _integer_x(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _color(name: str, i: int) -> str:
    return COLORS.get(name, FALLBACK_COLORS[i % len(FALLBACK_COLORS)])


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def training_curve(rows: Sequence[dict[str, Any]], title: str) -> bytes:
    """Reward per step (± reward_std when logged) and, when logged, the environment's success rate."""
    fig = _figure()
    ax = fig.add_subplot()
    steps = [r["step"] for r in rows if _finite(r.get("reward"))]
    reward = [r["reward"] for r in rows if _finite(r.get("reward"))]
    ax.plot(steps, reward, marker="o", markersize=3, color="#1b7f3b", label="reward (mean of group)")
    std = [r.get("reward_std") for r in rows if _finite(r.get("reward"))]
    if steps and all(_finite(s) for s in std):
        ax.fill_between(
            steps,
            [m - s for m, s in zip(reward, std, strict=True)],
            [m + s for m, s in zip(reward, std, strict=True)],
            color="#1b7f3b",
            alpha=0.15,
        )
    success = [(r["step"], r["env/success_rate"]) for r in rows if _finite(r.get("env/success_rate"))]
    if success:
        ax.plot(*zip(*success, strict=True), marker="s", markersize=3, color="#2c6fbb", label="success rate")
    ax.set_xlabel("GRPO step")
    _integer_x(ax)
    ax.set_ylabel("reward")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def curve_lines(points: Sequence[BudgetPoint]) -> list[tuple[str, str, list[BudgetPoint]]]:
    """(arm, series, its points by budget) for each line of the budget curve: one per arm and named series, each also
    passing through the arm's unnamed points (budget 0, the arm itself); one line for an arm without series."""
    lines = []
    for arm in dict.fromkeys(p.arm for p in points):
        named = list(dict.fromkeys(p.series for p in points if p.arm == arm and p.series)) or [""]
        for series in named:
            mine = [p for p in points if p.arm == arm and p.series in ("", series)]
            lines.append((arm, series, sorted(mine, key=lambda p: p.budget)))
    return lines


def budget_curve(points: Sequence[BudgetPoint], *, metric: str = "pass^1", unit: str = "rollouts") -> bytes:
    """Score vs rollout budget per arm (and series) with interval bands (TRACE Fig. 4)."""
    fig = _figure(6.4, 3.8)
    ax = fig.add_subplot()
    arms = list(dict.fromkeys(p.arm for p in points))
    seen: dict[str, int] = {}
    for arm, series, mine in curve_lines(points):
        j = seen[arm] = seen.get(arm, -1) + 1
        xs, ys = [p.budget for p in mine], [p.value for p in mine]
        color = _color(arm, arms.index(arm))
        label = ARM_LABELS.get(arm, arm) + (f" ({series})" if series else "")
        width = 2 if arm == "trace" else 1.4
        ax.plot(xs, ys, marker="os^v"[j % 4], color=color, label=label, linewidth=width, linestyle=("-", "--")[j % 2])
        if all(p.low is not None and p.high is not None for p in mine):
            ax.fill_between(xs, [p.low for p in mine], [p.high for p in mine], color=color, alpha=0.12)
    ax.set_xlabel(f"budget ({unit})")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs budget", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def arm_bars(
    names: Sequence[str],
    values: Sequence[float | None],
    lows: Sequence[float | None],
    highs: Sequence[float | None],
    *,
    metric: str = "pass^1",
) -> bytes:
    """One bar per arm with its interval."""
    fig = _figure(6.4, 3.2)
    ax = fig.add_subplot()
    xs = list(range(len(names)))
    heights = [v if v is not None else 0.0 for v in values]
    ax.bar(xs, heights, color=[_color(n, i) for i, n in enumerate(names)], alpha=0.85)
    for x, v, lo, hi in zip(xs, values, lows, highs, strict=True):
        if v is not None and lo is not None and hi is not None:
            ax.errorbar([x], [v], yerr=[[v - lo], [hi - v]], color="black", capsize=4, linewidth=1)
    ax.set_xticks(xs, [ARM_LABELS.get(n, n) for n in names], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    ax.set_ylim(0, max(1.0, *(h or 0.0 for h in highs)) if highs else 1.0)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def pass_k_curve(series: dict[str, list[tuple[int, float, float | None, float | None]]]) -> bytes:
    """pass^k against k, one line per group (env/split), with interval bands."""
    fig = _figure(5.2, 3.2)
    ax = fig.add_subplot()
    for i, (name, rows) in enumerate(series.items()):
        rows = [r for r in rows if _finite(r[1])]
        if not rows:
            continue
        ks, vs = [r[0] for r in rows], [r[1] for r in rows]
        color = FALLBACK_COLORS[i % len(FALLBACK_COLORS)]
        ax.plot(ks, vs, marker="o", color=color, label=name)
        if all(_finite(r[2]) and _finite(r[3]) for r in rows):
            ax.fill_between(ks, [r[2] for r in rows], [r[3] for r in rows], color=color, alpha=0.15)
    ax.set_xlabel("k")
    _integer_x(ax)
    ax.set_ylabel("pass^k")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def confusion_matrix(labels: Sequence[str], matrix: Sequence[Sequence[int]]) -> bytes:
    """Counts with row-normalised shading; rows = truth, columns = router's choice."""
    n = len(labels)
    fig = _figure(1.6 + 0.9 * n, 1.2 + 0.8 * n)
    ax = fig.add_subplot()
    shares = [[c / max(1, sum(row)) for c in row] for row in matrix]
    ax.imshow(shares, cmap="Greens", vmin=0, vmax=1)
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            ax.text(j, i, str(count), ha="center", va="center", color="white" if shares[i][j] > 0.6 else "black")
    ax.set_xticks(range(n), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_xlabel("routed to")
    ax.set_ylabel("truth")
    return _png(fig)


__all__ = ["arm_bars", "budget_curve", "confusion_matrix", "curve_lines", "data_uri", "pass_k_curve", "training_curve"]
