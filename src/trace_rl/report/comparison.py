"""The report's comparison section: every evaluation of the run (`evaluate/`, then each `evaluate@<name>/`), each
with its pass^k table, paired differences to base, the per-family table, TRACE against each baseline, the bar plot,
the score-vs-budget curve, and the held-in guard's verdicts where the guarded TRACE arm ran."""

from __future__ import annotations

from typing import Any

from trace_rl.artifacts.evaluation import ARM_LABELS, KNOWN_ARMS, Comparison, PassKRow, TargetedRow
from trace_rl.report import plots
from trace_rl.report.markup import ci, esc, img, num, signed, table
from trace_rl.report.sections import Context


def comparison_section(ctx: Context) -> str | None:
    found = {name: folder for name, folder in ctx.run.evaluations().items() if folder.comparison.exists()}
    if not found:
        return None
    parts = []
    for name, folder in found.items():
        if len(found) > 1:
            where = "evaluate/" if name is None else f"evaluate@{name}/"
            parts.append(f"<h3><code>{esc(where)}</code></h3>")
        parts.append(comparison_html(Comparison.load(folder.comparison)))
    return "".join(parts)


def comparison_html(comp: Comparison) -> str:
    order = {name: i for i, name in enumerate(KNOWN_ARMS)}
    arms = sorted(comp.arms, key=lambda a: order.get(a.name, len(order)))
    ks = list(range(1, comp.k_max + 1))
    headers = ["arm", *(f"pass^{k}" for k in ks), "Δ pass^1 vs base", "rollout budget", "episodes"]
    rows = []
    for arm in arms:
        cells = [f"<b>{esc(arm.display)}</b><div class='def'><code>{esc(arm.name)}</code></div>"]
        for k in ks:
            r = arm.at(k)
            cells.append(f"{num(r.value)}<div class='ci'>{ci(r.low, r.high)}</div>" if r else "–")
        d = arm.at(1, diff=True)
        cells.append(f"{signed(d.value)}<div class='ci'>{ci(d.low, d.high)}</div>" if d else "–")
        cells += [num(arm.rollout_budget), num(arm.episodes)]
        rows.append(cells)
    out = [
        f"<p>{esc(comp.env)}/{esc(comp.split)}: {comp.tasks} tasks × {comp.trials} trials; intervals are "
        f"{int(comp.level * 100)}% bootstrap over tasks ({comp.bootstrap_samples} resamples), Δ is paired.</p>",
        table(headers, rows, cls="comparison"),
    ]
    out.append(family_html(arms))
    if comp.trace_versus:
        out.append(versus_html(comp))
    out.extend(guard_html(arm.details["guard"]) for arm in arms if isinstance(arm.details.get("guard"), dict))
    if comp.targeted:
        out.append(targeted_html(comp.targeted))
    p1 = [arm.at(1) for arm in arms]
    out.append(
        img(
            plots.arm_bars(
                [a.name for a in arms],
                [r.value if r else None for r in p1],
                [r.low if r else None for r in p1],
                [r.high if r else None for r in p1],
            ),
            "pass^1 per arm",
        )
    )
    if comp.budget_curve:
        out.append(f"<h3>{esc(comp.metric)} vs budget in {esc(comp.budget_unit)} (TRACE Fig. 4)</h3>")
        out.append(
            img(
                plots.budget_curve(comp.budget_curve, metric=comp.metric, unit=comp.budget_unit),
                "score vs rollout budget",
            )
        )
    else:
        out.append("<h3>Score vs rollout budget</h3><p class='missing'>not run yet</p>")
    out.extend(f"<p class='note'>{esc(n)}</p>" for n in comp.notes)
    return "".join(out)


def versus_html(comp: Comparison) -> str:
    """TRACE minus each other arm but base, per k (paired over tasks): the paper's claims against its baselines."""
    ks = list(range(1, comp.k_max + 1))
    rows = []
    for d in comp.trace_versus:
        cells = [esc(ARM_LABELS.get(d.arm, d.arm))]
        for k in ks:
            r = d.at(k)
            cells.append(f"{signed(r.value)}<div class='ci'>{ci(r.low, r.high)}</div>" if r else "–")
        rows.append(cells)
    return "<h3>TRACE against each baseline</h3>" + table(
        ["TRACE minus", *(f"Δ pass^{k} (paired)" for k in ks)], rows, cls="comparison"
    )


def guard_html(guard: dict[str, Any]) -> str:
    """The held-in guard's verdict per adapter: the train tasks routed to it, its score and base's, the paired Δ."""
    headers = ["adapter", "routed train tasks", "adapter", "base", "Δ (paired)", "verdict"]
    rows = []
    for v in guard.get("verdicts", []):
        has = v["delta"] is not None
        delta = f"{signed(v['delta'])}<div class='ci'>{ci(v['low'], v['high'])}</div>" if has else "–"
        verdict = "kept" if v["kept"] else "<b>dropped</b> (base serves its tasks)"
        rows.append([esc(v["adapter"]), num(v["tasks"]), num(v["adapter_score"]), num(v["base_score"]), delta, verdict])
    what = f"{guard.get('score', 'success')} on {guard.get('train_tasks', '?')} target train tasks × "
    what += f"{guard.get('trials', '?')} trials, {guard.get('selection_rollouts', '?')} episodes"
    return f"<h3>Held-in guard (TRACE guarded)</h3><p>{esc(what)}; keep when Δ ≥ {guard.get('min_delta', 0)}.</p>" + (
        table(headers, rows, cls="comparison")
    )


def targeted_html(rows: list[TargetedRow]) -> str:
    """Each adapter alone: its paired Δ pass^1 over base on its own families against the other families."""
    headers = ["adapter", "own families", "Δ own", "Δ others"]

    def cell(r: PassKRow) -> str:
        return (
            f"{signed(r.value)}<div class='ci'>{ci(r.low, r.high)} · {r.tasks} tasks</div>"
            if r.value is not None
            else "–"
        )

    body = [[esc(r.adapter), esc(", ".join(r.own_families)), cell(r.own), cell(r.others)] for r in rows]
    intro = "<p>Each adapter alone on these tasks (single best, select=test): paired Δ pass^1 over base on the task "
    intro += "families its environment's evidence came from, and on the rest.</p>"
    return "<h3>Targeted: own families against the rest</h3>" + intro + table(headers, body, cls="comparison")


def family_html(arms: list[Any]) -> str:
    """pass^1 per task family and arm, with each arm's paired Δ to base on that family ("" without families)."""
    families = sorted({row.family for arm in arms for row in arm.by_family})
    if not families:
        return ""
    others = [a for a in arms if a.name != "base"]
    headers = ["family", "tasks", *(f"{a.display} pass^1" for a in arms), *(f"Δ {a.display}" for a in others)]
    rows = []
    for family in families:
        by = {a.name: next((r for r in a.by_family if r.family == family), None) for a in arms}
        cells = [esc(family), num(max((r.tasks for r in by.values() if r), default=0))]
        for a in arms:
            r = by[a.name].at(1) if by[a.name] else None
            cells.append(f"{num(r.value)}<div class='ci'>{ci(r.low, r.high)}</div>" if r else "–")
        for a in others:
            d = by[a.name].at(1, diff=True) if by[a.name] else None
            cells.append(f"{signed(d.value)}<div class='ci'>{ci(d.low, d.high)}</div>" if d else "–")
        rows.append(cells)
    return "<h3>Per task family</h3>" + table(headers, rows, cls="comparison")


__all__ = ["comparison_html", "comparison_section", "family_html", "guard_html", "targeted_html", "versus_html"]
