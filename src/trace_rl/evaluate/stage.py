"""Stage 5 over a run directory: every selected arm on the target's held-out split, then the comparison.

    evaluate/arms/<arm>.jsonl      each arm's trajectories (same tasks, trials and trial seeds for every arm)
    evaluate/curve/*.jsonl         score-vs-budget points (TRACE capability prefixes, GRPO checkpoints, GEPA candidates)
    evaluate/plans.json            who played into each file (a rerun with other settings is refused, not mixed)
    evaluate/arms.json             what each arm consumed and why an arm was skipped (kept across invocations)
    evaluate/comparison.json       pass^k with 95% intervals, paired differences to base, budgets, the curve
    evaluate/budget.json           the budget accounting
    evaluate/summary.md            the comparison table, for a README

With `out` set (`--out range1`) all of it goes to `evaluate@<out>/` instead: another split or test range of the same
run beside the first (the baselines evaluate trains stay shared under `evaluate/`).

With `run.report_to` set, the comparison's pass^k figures and table also go to that tracker (run name `evaluate`).

Resumable at every level: a killed evaluate reruns only the missing episodes of each arm (and resumes baseline
training from its checkpoints, GEPA from its stored episodes). `--arms` selects arms; arms evaluated by earlier
invocations stay in the comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.artifacts.adapters import capability_adapters
from trace_rl.artifacts.evaluation import (
    ArmEntry,
    BudgetPoint,
    Comparison,
    CurveEntry,
    TargetedRow,
    read_arm_index,
    write_arm_index,
)
from trace_rl.artifacts.layout import EvaluateLayout
from trace_rl.artifacts.store import RunDir, atomic_write_json, atomic_write_text
from trace_rl.config import TraceConfig
from trace_rl.config.evaluate import ARMS, EvaluateConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.evaluate.arms import ARMS_BY_NAME
from trace_rl.evaluate.budget import AdapterBudget, Ledger, run_adapter_budget
from trace_rl.evaluate.compare import (
    arm_result,
    family_table,
    log_comparison,
    markdown_table,
    summarize_records,
    trace_versus,
    versus_table,
)
from trace_rl.evaluate.episodes import STAGE, ArmSkipped, EvalContext, check_tasks
from trace_rl.evaluate.targeted import own_families, targeted_markdown, targeted_rows
from trace_rl.models.base import ModelClient
from trace_rl.models.registry import ModelClients
from trace_rl.models.specs import add_model_spec
from trace_rl.routing.policy import model_label, policy_model, policy_sampling
from trace_rl.routing.router import Router, router_factory
from trace_rl.stage import StageContext, StageFailed
from trace_rl.stats import GroupSummary
from trace_rl.tracking import TrackingSettings, check_available, tracking


def build_context(
    run: RunDir,
    cfg: TraceConfig,
    ecfg: EvaluateConfig,
    *,
    clients: dict[str, ModelClient] | None = None,
    router: Router | Callable[[Any], Router] | None = None,
    backend: Any = None,
    reflection_lm: Callable[[Any], str] | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> EvalContext:
    """Check the request and build what every arm shares (nothing is written)."""
    domain = load_domain(cfg.env.name, cfg.env)
    tasks = check_tasks(domain, cfg.env.name, ecfg.split, ecfg.task_limit)
    clients = ModelClients(cfg, clients)  # the given ones (tests) kept; the others built on first use
    name, model_cfg, warnings = policy_model(cfg, run, ecfg.policy)
    for w in warnings:
        echo(f"warning: {w}")
    user_name = ecfg.user if ecfg.user is not None else cfg.rollout.user
    if user_name == "scripted":
        unscripted = [t.id for t in tasks if domain.scripted_user(t) is None]
        if unscripted:
            raise UserError(
                f"{cfg.env.name}/{ecfg.split}: {len(unscripted)} tasks have no scripted user; "
                "set evaluate's user to an LLM user model"
            )
        user_client, user_label = None, "scripted"
    else:
        if user_name not in clients:
            user_name = add_model_spec(cfg, user_name)
        user_client = clients[user_name]
        user_cfg = cfg.models.get(user_name)
        user_label = (user_cfg.model if user_cfg else "") or user_name
    total, source = ecfg.budget, "--budget"
    budgets: dict[str, AdapterBudget] = {}
    if total is None:
        budgets = {n: run_adapter_budget(run, n) for n in capability_adapters(run)}
        total = sum(b.rollouts for b in budgets.values()) or None
        source = "sum over capability adapters: " + ", ".join(
            f"{b.name}={b.rollouts} ({b.source})" for b in budgets.values()
        )
    from trace_rl.executor import make_executor

    executor = make_executor(cfg.executor, STAGE)
    return EvalContext(
        run=run,
        cfg=cfg,
        ecfg=ecfg,
        domain=domain,
        env_name=cfg.env.name,
        tasks=tasks,
        client=clients[name],
        policy_name=name,
        policy_cfg=model_cfg,
        model_label=model_label(name, model_cfg),
        sampling=policy_sampling(cfg, model_cfg, temperature=ecfg.temperature, max_tokens=ecfg.max_tokens),
        limits=EpisodeLimits(
            max_steps=cfg.env.max_steps, max_errors=cfg.env.max_errors, timeout_s=cfg.rollout.episode_timeout_s
        ),
        user_client=user_client,
        user_label=user_label,
        clients=clients,
        router_factory=None if router is None else router_factory(router),
        backend=backend,
        reflection_lm=reflection_lm,
        total_budget=total,
        budget_source=source,
        echo=echo,
        executor=executor,
        budgets=budgets,
    )


def _save_output(evaluate: EvaluateLayout, out: ArmEntry) -> None:
    index = read_arm_index(evaluate)
    index.arms[out.name] = out
    index.skipped.pop(out.name, None)
    write_arm_index(evaluate, index)


def _save_skip(evaluate: EvaluateLayout, arm: str, reason: str) -> None:
    index = read_arm_index(evaluate)
    index.arms.pop(arm, None)
    index.skipped[arm] = reason
    write_arm_index(evaluate, index)


def _group(ctx: EvalContext, relpath: str, trials: int, split: str | None = None) -> GroupSummary:
    e = ctx.ecfg
    return summarize_records(
        ctx.store(relpath).latest(),
        ctx.env_name,
        split or ctx.split,
        [t.id for t in ctx.tasks],
        trials,
        samples=e.samples,
        seed=e.bootstrap_seed,
        level=e.level,
    )


def _point(ctx: EvalContext, point: CurveEntry) -> BudgetPoint | None:
    group = _group(ctx, point.relpath, point.trials)
    first = group.pass_k[0] if group.pass_k else None
    if first is None or first.value != first.value:  # NaN: nothing scored yet
        return None
    return BudgetPoint(
        arm=point.arm, budget=point.budget, value=first.value, low=first.low, high=first.high, series=point.series
    )


def _targeted(ctx: EvalContext, base: GroupSummary, families: dict[str, str]) -> list[TargetedRow]:
    """The targeted table, from the adapters evaluated alone on these held-out tasks (single_best select=test)."""
    alone = {
        name: _group(ctx, EvaluateLayout.single_best("test", name), ctx.ecfg.trials)
        for name in capability_adapters(ctx.run)
        if ctx.path(EvaluateLayout.single_best("test", name)).exists()
    }
    if not alone:
        return []
    try:
        train = {t.id: str(t.metadata["family"]) for t in ctx.train_tasks() if t.metadata.get("family")}
    except ArmSkipped:
        return []
    own = {name: own_families(ctx.run, name, train) for name in alone}
    e = ctx.ecfg
    return targeted_rows(alone, base, families, own, samples=e.samples, seed=e.bootstrap_seed, level=e.level)


def compile_comparison(ctx: EvalContext, *, command: str | None = None) -> tuple[Comparison, dict[str, str]]:
    """`evaluate/comparison.json` from every arm evaluated so far (this invocation or earlier ones)."""
    e = ctx.ecfg
    index = read_arm_index(ctx.out)
    outputs = index.arms
    skipped: dict[str, str] = dict(index.skipped)
    base_out = outputs.get("base")
    base = _group(ctx, base_out.relpath, e.trials) if base_out else None
    families = {t.id: str(t.metadata["family"]) for t in ctx.tasks if t.metadata.get("family")}
    arms, groups = [], {}
    for name in [a for a in ARMS if a in outputs]:
        out = outputs[name]
        group = groups[name] = base if name == "base" else _group(ctx, out.relpath, e.trials)
        arms.append(
            arm_result(
                name,
                group,
                base,
                samples=e.samples,
                seed=e.bootstrap_seed,
                level=e.level,  # type: ignore[arg-type]
                budget=out.budget,
                adapters=out.adapters,
                description=out.description,
                details=out.details,
                families=families,
            )
        )
    targeted = _targeted(ctx, base, families) if base is not None and families else []
    curve: list[BudgetPoint] = []
    for name in ("trace", "grpo_target", "gepa"):
        out = outputs.get(name)
        if out is None:
            continue
        if base is not None and base.pass_k:
            b = base.pass_k[0]
            curve.append(BudgetPoint(arm=name, budget=0, value=b.value, low=b.low, high=b.high))
        curve.extend(p for p in (_point(ctx, c) for c in out.curve) if p is not None)
        whole = _point(ctx, CurveEntry(arm=name, budget=out.budget, relpath=out.relpath, trials=e.trials))
        if whole is not None:
            curve.append(whole)
    ledger = Ledger(trace_total=ctx.total_budget, trace_source=ctx.budget_source)
    for n, o in outputs.items():
        ledger.arms[n] = {"rollouts": o.budget, **({"budget": o.details["budget"]} if "budget" in o.details else {})}
    if "trace" in outputs:
        ledger.adapters = outputs["trace"].details.get("adapter_budgets", {})
    notes = [
        f"{len(ctx.tasks)} {ctx.env_name}/{ctx.split} tasks × {e.trials} trials per arm, the same trial seeds for "
        "every arm; differences to base are paired over tasks (percentile bootstrap, "
        f"{e.samples} resamples, level {e.level}).",
        "Budget: one rollout = one episode. " + " · ".join(ledger.rules[1:5]) + ".",
        "The score-vs-budget curve plots pass^1 (each point its own evaluation with "
        f"{e.curve.trials} trial(s) per task; the arm's own point uses {e.trials}).",
    ]
    notes += [f"{a} skipped: {why}" for a, why in skipped.items()]
    comparison = Comparison(
        env=ctx.env_name,
        split=ctx.split,
        tasks=len(ctx.tasks),
        trials=e.trials,
        level=e.level,
        bootstrap_samples=e.samples,
        arms=arms,
        budget_curve=sorted(curve, key=lambda p: (p.arm, p.budget)),
        targeted=targeted,
        trace_versus=trace_versus(groups, e.trials, samples=e.samples, seed=e.bootstrap_seed, level=e.level),
        notes=notes,
        created_at=time.time(),
        details={
            "skipped": skipped,
            "budget": ledger.as_dict(),
            "identity": ctx.identity(),
            "command": command,
            "user": ctx.user_label,
            "policy": ctx.model_label,
        },
    )
    return comparison, skipped


def write_outputs(ctx: EvalContext, comparison: Comparison, skipped: dict[str, str]) -> str:
    comparison.save(ctx.out.comparison)
    atomic_write_json(ctx.out.budget, comparison.details["budget"])
    table = markdown_table(comparison.arms, comparison.k_max, skipped)
    lines = [f"# {ctx.env_name}/{ctx.split}: {comparison.tasks} tasks × {comparison.trials} trials", "", table, ""]
    by_family = family_table(comparison.arms)
    if by_family:
        lines += ["Per task family (pass^1 %, paired Δ to base on the family's tasks):", "", by_family, ""]
    if comparison.trace_versus:
        lines += ["TRACE against each other arm (points, paired over tasks):", ""]
        lines += [versus_table(comparison.trace_versus, comparison.k_max), ""]
    if comparison.targeted:
        lines += ["Targeted: each adapter alone, Δ pass^1 vs base (points, paired) on its own families and the rest:"]
        lines += ["", targeted_markdown(comparison.targeted), ""]
    if comparison.budget_curve:
        lines += ["Score vs training rollouts (pass^1 %):", ""]
        lines += [
            f"- {p.arm}{f' ({p.series})' if p.series else ''} @ {p.budget}: {100 * p.value:.1f}"
            for p in comparison.budget_curve
        ]
        lines.append("")
    lines += [f"- {n}" for n in comparison.notes]
    text = "\n".join(lines) + "\n"
    atomic_write_text(ctx.out.summary, text)
    return table


def run_evaluate(
    run: RunDir | Path,
    cfg: TraceConfig,
    ecfg: EvaluateConfig,
    *,
    clients: dict[str, ModelClient] | None = None,
    router: Router | Callable[[Any], Router] | None = None,
    backend: Any = None,
    reflection_lm: Callable[[Any], str] | None = None,
    command: str | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> Comparison:
    """Run the selected arms (resuming each), then write the comparison of every arm evaluated so far.

    Injection points for tests: `clients` (name -> client), `router` (a Router, or a factory from a RouterSpec),
    `backend` (a TrainerBackend for the baselines), `reflection_lm` (GEPA's reflection callable)."""
    run = run if isinstance(run, RunDir) else RunDir(Path(run))
    run.require()
    tracking_settings = TrackingSettings.from_run(cfg.run, run.root, run_name=STAGE)
    if tracking_settings.enabled:
        check_available(tracking_settings.report_to)  # before any work
    ctx = build_context(
        run, cfg, ecfg, clients=clients, router=router, backend=backend, reflection_lm=reflection_lm, echo=echo
    )
    run.ensure(command=command)
    try:
        stage = STAGE if not ecfg.out else f"{STAGE}@{ecfg.out}"
        with run.stage(stage, {**ecfg.model_dump(mode="json"), "policy": ctx.model_label}, command=command) as record:
            for arm in ecfg.arms:
                echo(f"== arm {arm}")
                try:
                    out = ARMS_BY_NAME[arm](ctx)
                except ArmSkipped as exc:
                    echo(f"{arm}: skipped ({exc})")
                    _save_skip(ctx.out, arm, str(exc))
                    continue
                _save_output(ctx.out, out)
            comparison, skipped = compile_comparison(ctx, command=command)
            write_outputs(ctx, comparison, skipped)
            with tracking(tracking_settings) as tracker:
                log_comparison(tracker, comparison)
            record.summary = {
                "arms": {a.name: a.at(1).value if a.at(1) else None for a in comparison.arms},
                "skipped": skipped,
                "budget": ctx.total_budget,
            }
    finally:
        ctx.close()
    return comparison


class EvaluateStage:
    """The evaluate stage: the selected arms on the target's held-out split, then the comparison."""

    name = STAGE

    def section(self, config: TraceConfig) -> EvaluateConfig:
        return config.evaluate

    def run(self, ctx: StageContext, section: EvaluateConfig) -> Comparison:
        ctx.run.require("run the earlier stages first")
        comparison = run_evaluate(ctx.run, ctx.config, section, command=ctx.command, echo=ctx.echo)
        skipped = comparison.details.get("skipped") or {}
        ctx.echo(markdown_table(comparison.arms, comparison.k_max, skipped))
        by_family = family_table(comparison.arms)
        if by_family:
            ctx.echo(by_family)
        episodes = {a.name: a.details.get("episodes", {}) for a in comparison.arms}
        incomplete = [name for name, c in episodes.items() if c.get("infra") or c.get("missing")]
        ctx.echo(f"comparison: {ctx.run.evaluation(section.out).comparison}")
        if incomplete:
            raise StageFailed(f"incomplete arms: {', '.join(incomplete)}; rerun the same command to finish them")
        return comparison


EVALUATE = EvaluateStage()


__all__ = ["EVALUATE", "EvaluateStage", "build_context", "compile_comparison", "run_evaluate", "write_outputs"]
