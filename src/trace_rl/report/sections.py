"""One renderer per pipeline stage: each reads its stage's artefacts from the run directory and returns the section's
HTML, or None when the stage has not run (the page then says "not run yet").

Every file is read through `trace_rl.artifacts` (its typed readers; a malformed file is a one-line error naming it):
rollout summaries and pass^k with bootstrap intervals from `trace_rl.stats`, the capability view from
`trace_rl.report.capabilities`, the environment, adapter, router and evaluation records from their artifacts modules.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trace_rl.artifacts.adapters import read_eval, read_metrics
from trace_rl.artifacts.environments import read_calibration, read_env_spec, read_env_status
from trace_rl.artifacts.evaluation import RoutingAccuracy
from trace_rl.artifacts.layout import MIX_ADAPTER, AdapterLayout, EnvLayout
from trace_rl.artifacts.router import RouterSpec
from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.report import plots
from trace_rl.report.markup import anchor, badge, ci, esc, img, kv_table, num, signed, table, trajectory_html
from trace_rl.types import Trajectory


@dataclass
class Context:
    """What sections share: the run, rollout records by id, and trajectories to show in the appendix."""

    run: RunDir
    max_failed: int = 3
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)
    appendix: dict[str, Trajectory] = field(default_factory=dict)

    def link(self, trajectory_id: str) -> str:
        """A link to the trajectory when the report shows it (adding it to the appendix if it is known)."""
        if trajectory_id not in self.shown and trajectory_id not in self.appendix:
            record = self.records.get(trajectory_id)
            if record is not None:
                with contextlib.suppress(ValidationError):
                    self.appendix[trajectory_id] = Trajectory.model_validate(record)
        if trajectory_id in self.shown or trajectory_id in self.appendix:
            return f'<a href="#{anchor(trajectory_id)}"><code>{esc(trajectory_id)}</code></a>'
        return f"<code>{esc(trajectory_id)}</code>"


# -- 1. rollouts -----------------------------------------------------------------------------------------------------


def rollout_section(ctx: Context) -> str | None:
    from trace_rl.report.rollout_tables import load_summaries

    path = ctx.run.trajectories
    if not path.exists():
        return None
    ctx.records = JsonlStore(path).latest()
    summaries = load_summaries(ctx.run)
    out = []
    rows = [
        (
            esc(s.env),
            esc(s.split),
            num(s.tasks),
            num(s.trials),
            num(s.scored),
            num(s.infra),
            num(s.missing),
            f"{s.successes}/{s.scored} = {num(s.success_rate)}" if s.scored else "–",
            num(s.mean_reward),
        )
        for s in summaries
    ]
    out.append(table(["env", "split", "tasks", "trials", "scored", "infra", "missing", "success", "mean reward"], rows))
    pk_rows = [
        (f"{esc(s.env)}/{esc(s.split)}", num(p.k), num(p.value), ci(p.low, p.high), f"{p.tasks}/{s.tasks}")
        for s in summaries
        for p in s.pass_k
    ]
    out.append(
        "<h3>pass^k</h3><p class='note'>Mean over tasks of C(c,k)/C(n,k); 95% bootstrap interval over tasks.</p>"
    )
    out.append(table(["env/split", "k", "pass^k", "95% CI", "tasks with ≥k scored trials"], pk_rows))
    series = {f"{s.env}/{s.split}": [(p.k, p.value, p.low, p.high) for p in s.pass_k] for s in summaries}
    if any(len(v) > 1 for v in series.values()):
        out.append(img(plots.pass_k_curve(series), "pass^k against k"))
    term_rows = [
        (f"{esc(s.env)}/{esc(s.split)}", esc(reason), num(n), num(n / max(1, sum(s.terminations.values())), 2))
        for s in summaries
        for reason, n in s.terminations.most_common()
    ]
    out.append("<h3>Termination reasons</h3>" + table(["env/split", "reason", "episodes", "share"], term_rows))
    infra = [(f"{esc(s.env)}/{esc(s.split)}", esc(k), num(n)) for s in summaries for k, n in s.infra_kinds.items()]
    if infra:
        out.append(
            "<h3>Infrastructure failures</h3><p class='note'>Not agent failures; rerun the rollout to retry.</p>"
        )
        out.append(table(["env/split", "kind", "episodes"], infra))
    out.append(_failed_examples(ctx))
    return "".join(out)


def _failed_examples(ctx: Context) -> str:
    failed = [r for r in ctx.records.values() if r.get("infra_error") is None and not r.get("success")]
    failed.sort(key=lambda r: (str(r.get("task_id")), int(r.get("trial", 0))))
    picked, tasks = [], set()
    for r in failed:  # one per task first, so the examples show different failures
        if r["task_id"] not in tasks and len(picked) < ctx.max_failed:
            picked.append(r)
            tasks.add(r["task_id"])
    if not picked:
        return "<h3>Failed trajectories</h3><p class='note'>No scored failures.</p>"
    html = []
    for r in picked:
        try:
            traj = Trajectory.model_validate(r)
        except ValidationError:
            continue
        ctx.shown.add(traj.id)
        html.append(trajectory_html(traj, open_=not html))
    n = len(failed)
    return f"<h3>Failed trajectories</h3><p class='note'>{len(html)} of {n} scored failures.</p>" + "".join(html)


# -- 2. capabilities -------------------------------------------------------------------------------------------------


def capabilities_section(ctx: Context) -> str | None:
    from trace_rl.report.capabilities import run_capabilities_dict

    if not ctx.run.capabilities.exists():
        return None
    view = run_capabilities_dict(ctx.run)
    p, n = view["params"], view["n_trajectories"]
    selected = set(view["selected"])
    head = (
        f"<p>Analyst <code>{esc(view['analyst'])}</code>; ρ = {num(p['rho'], 2)}, δ = {num(p['delta'], 2)}, "
        f"kept when it passes in ≥ {p['k']} of {p['n_runs']} labeling runs; {num(n.get('diagnosed'))} trajectories "
        f"({num(n.get('failed'))} failed) from split(s) {esc(', '.join(view['splits']))}.</p>"
    )
    rows = []
    for r in view["rows"]:
        mark = badge("selected", "ok") if r["name"] in selected else badge("rejected", "muted")
        examples = ", ".join(ctx.link(t) for t in r["example_trajectory_ids"][:3]) or "–"
        rows.append(
            (
                mark,
                f"<b>{esc(r['name'])}</b><div class='def'>{esc(r['definition'])}</div>",
                _pm(r["delta_mean"], r["delta_std"]),
                _pm(r["cov_mean"], r["cov_std"], sign=False),
                f"{num(r['runs_passed'])}/{num(r['n_runs'])}",
                examples,
            )
        )
    warnings = "".join(f"<li>{esc(w)}</li>" for w in view["warnings"])
    return (
        head
        + table(["", "capability", "Δ", "Cov", "runs passed", "example failed trajectories"], rows)
        + (f"<div class='warn'>Warnings<ul>{warnings}</ul></div>" if warnings else "")
    )


def _pm(mean: float | None, std: float | None, *, sign: bool = True) -> str:
    if mean is None:
        return "–"
    text = signed(mean, 2) if sign else num(mean, 2)
    return f"{text} ± {num(std, 2)}" if std else text


# -- 3. environments -------------------------------------------------------------------------------------------------

FIGURES = (
    ("mean_reward", "mean reward"),
    ("reward_std", "reward std"),
    ("success_rate", "success rate"),
    ("informative_groups", "informative groups"),
    ("constant_groups", "constant groups"),
    ("all_success_groups", "all-success groups"),
    ("all_zero_groups", "all-zero groups"),
)


def environments_section(ctx: Context) -> str | None:
    envs = [env for env in ctx.run.envs() if env.has_records()]
    if not envs:
        return None
    return "".join(_environment(env) for env in envs)


def _environment(env: EnvLayout) -> str:
    spec = read_env_spec(env) if env.spec.exists() else None
    status = read_env_status(env)
    cal = read_calibration(env)
    state = status.status if status else "unfinished"
    head = f"<h3>{esc(env.name)} {badge(state, 'ok' if state == 'ready' else 'bad')}</h3>"
    gen = spec.generator if spec else None
    policy, groups, samples, temperature = (
        (cal.policy, cal.groups, cal.samples, cal.temperature) if cal else (None,) * 4
    )
    items = [
        ("definition", esc(spec.definition if spec else "–")),
        ("generator", f"{esc(gen.kind if gen else '–')}, difficulty {num(gen.difficulty if gen else None)}"),
        (
            "calibration",
            f"{num(len(cal.attempts) if cal else 0)} attempt(s), policy <code>{esc(policy)}</code>, "
            f"{num(groups)} groups × {num(samples)} samples at T = {num(temperature, 2)}",
        ),
    ]
    if status and status.reason:
        items.append(("reason", esc(status.reason)))
    final = cal.final if cal else None
    figures = (final.figures if final else None) or (status.figures if status else None) or {}
    body = kv_table(items)
    if figures:
        checks = final.checks if final else {}
        labels = dict(FIGURES)
        keys = [k for k in labels if k in figures] + [k for k in checks if k not in labels]
        rows = [
            _figure_row(labels.get(k, k), figures.get(k, (checks.get(k) or {}).get("value")), checks.get(k) or {})
            for k in keys
        ]
        body += table(["figure", "value", "acceptance", ""], rows)
    attempts = cal.attempts if cal else []
    if len(attempts) > 1:
        rows = [
            (
                num(a.attempt),
                num(a.difficulty),
                num(a.figures.get("mean_reward")),
                num(a.figures.get("success_rate")),
                esc(a.direction or ("accepted" if a.accepted else "")),
            )
            for a in attempts
        ]
        body += "<h4>Calibration attempts</h4>" + table(["attempt", "difficulty", "mean reward", "success", "→"], rows)
    return head + body


def _acceptance(check: dict[str, Any]) -> str:
    """A calibration check's threshold as text: `lo – hi` (range), `≥ min`, `≤ max`."""
    rng = check.get("range")
    if isinstance(rng, list | tuple) and len(rng) == 2:
        lo, hi = rng
        if lo is not None and hi is not None:
            return f"{lo} – {hi}"
        return f"≥ {lo}" if lo is not None else f"≤ {hi}"
    if check.get("min") is not None:
        return f"≥ {check['min']}"
    if check.get("max") is not None:
        return f"≤ {check['max']}"
    return ""


def _figure_row(label: str, value: Any, check: dict[str, Any]) -> tuple[str, ...]:
    ok = check.get("ok")
    verdict = "" if ok is None else badge("ok" if ok else "out of range", "ok" if ok else "bad")
    return esc(label), num(value), esc(_acceptance(check)), verdict


# -- 4. adapters -----------------------------------------------------------------------------------------------------


def adapters_section(ctx: Context) -> str | None:
    adapters = [adapter for adapter in ctx.run.adapters() if adapter.has_records()]
    if not adapters:
        return None
    return "".join(_adapter(adapter) for adapter in adapters)


def _adapter(adapter: AdapterLayout) -> str:
    baseline = " (multi-capability baseline)" if adapter.name == MIX_ADAPTER else ""
    out = [f"<h3>{esc(adapter.name)}{baseline}</h3>"]
    before, after = read_eval(adapter.eval_before), read_eval(adapter.eval_after)
    if before or after:
        rows = []
        for label, ev in (("before (base)", before), ("after (adapter)", after)):
            if ev:
                rows.append(
                    (
                        esc(label),
                        num(ev.episodes),
                        f"{num(ev.mean_reward)} ± {num(ev.reward_stderr)}",
                        f"{num(ev.success_rate)} ± {num(ev.success_stderr)}",
                    )
                )
        out.append("<p class='note'>Held-out seeds of the capability's environment (± standard error).</p>")
        out.append(table(["policy", "episodes", "mean reward", "success rate"], rows))
    rows_m = read_metrics(adapter.metrics) if adapter.metrics.exists() else []
    if rows_m:
        last = rows_m[-1]
        out.append(
            f"<p>{len(rows_m)} logged step(s); last step {last['step']}: reward {num(last.get('reward'))}, "
            f"groups dropped {num(last.get('groups/frac_dropped'))}.</p>"
        )
        curve = plots.training_curve(rows_m, f"{adapter.name}: reward per GRPO step")
        out.append(img(curve, f"{adapter.name} curve"))
    elif not before and not after:
        out.append("<p class='missing'>no training metrics yet</p>")
    if adapter.eval_plot.exists():
        out.append(img(adapter.eval_plot.read_bytes(), f"{adapter.name} before/after evaluation"))
    return "".join(out)


# -- 5. routing ------------------------------------------------------------------------------------------------------


def routing_section(ctx: Context) -> str | None:
    spec_path, acc_path = ctx.run.router, ctx.run.accuracy
    if not spec_path.exists() and not acc_path.exists():
        return None
    out = []
    if spec_path.exists():
        spec = RouterSpec.load(spec_path)
        rows = [
            (
                f"<b>{esc(o.label)}</b>",
                esc(o.name),
                esc(o.description or ("(default base text)" if o.is_base else "")),
                esc(o.example or "–"),
                f"<code>{esc(o.adapter_path or '–')}</code>",
            )
            for o in spec.options
        ]
        out.append(f"<p>Label-logit router on the frozen base model <code>{esc(spec.base_model)}</code>.</p>")
        out.append(table(["label", "option", "description", "example", "adapter"], rows))
    if acc_path.exists():
        acc = RoutingAccuracy.load(acc_path)
        a = acc.accuracy
        items = [
            ("tasks", f"{acc.n_tasks} ({esc(acc.env)}{'/' if acc.env and acc.split else ''}{esc(acc.split)})"),
            ("truth", esc(acc.truth)),
            ("accuracy", f"{num(a.value)} {ci(a.low, a.high)}"),
            ("routed to base", num(acc.base_rate)),
            ("potential rate", num(acc.potential_rate)),
        ]
        for label, est in (("routed pass^1", acc.routed_pass1), ("oracle pass^1", acc.oracle_pass1)):
            if est is not None:
                items.append((label, f"{num(est.value)} {ci(est.low, est.high)}"))
        out.append("<h3>Routing accuracy</h3>" + kv_table(items))
        out.append(img(plots.confusion_matrix(acc.labels, acc.confusion), "routing confusion matrix"))
        rows = [[f"<b>{esc(t)}</b>", *(num(c) for c in row)] for t, row in zip(acc.labels, acc.confusion, strict=True)]
        out.append(table(["truth \\ routed", *acc.labels], rows, cls="confusion"))
    else:
        out.append("<h3>Routing accuracy</h3><p class='missing'>not run yet</p>")
    return "".join(out)


# -- 6. comparison ---------------------------------------------------------------------------------------------------


def appendix_section(ctx: Context) -> str | None:
    if not ctx.appendix:
        return None
    return "".join(trajectory_html(t) for _, t in sorted(ctx.appendix.items()))


__all__ = [
    "Context",
    "adapters_section",
    "appendix_section",
    "capabilities_section",
    "environments_section",
    "rollout_section",
    "routing_section",
]
