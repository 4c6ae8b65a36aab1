"""The `trace` arm: the frozen base model routes each task once, from its first user message, to one capability
adapter (or base), which serves the whole episode (TRACE §3.5). Budget: the sum over the capability adapters. With the
curve on, the router restricted to the first m capabilities gives one score-vs-budget point per m (the paper's
points), and, at each curve fraction f where every adapter kept a Trainer checkpoint at step round(f · its steps), the
same router over those checkpoints gives one more (the issue's scaling plot at 25/50/… % of the budget)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trace_rl.artifacts.adapters import capability_adapters
from trace_rl.artifacts.evaluation import ArmEntry, CurveEntry
from trace_rl.artifacts.layout import AdapterLayout, EvaluateLayout
from trace_rl.artifacts.router import BASE, RouterSpec, read_router
from trace_rl.config.train import steps_at_fractions
from trace_rl.errors import UserError
from trace_rl.evaluate.arms.common import adapter_stamp, claim, why_no_adapters
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext, RoutedClient
from trace_rl.evaluate.guard import route_of
from trace_rl.routing.router import Router, make_router
from trace_rl.routing.spec import make_options, spec_from_run
from trace_rl.training.checkpoints import is_complete, kept_checkpoints

NAME = "trace"


def trace_spec(ctx: EvalContext) -> RouterSpec:
    """The run's router (`route/router.json`), else one built from the trained adapters (not saved)."""
    adapters = capability_adapters(ctx.run)
    if not adapters:
        raise ArmSkipped(f"no trained capability adapters ({why_no_adapters(ctx.run)})")
    if ctx.run.router.exists():
        spec = read_router(ctx.run)
        missing = [n for n, p in spec.adapters.items() if not AdapterLayout(p).is_peft()]
        if missing:
            where = ctx.run.router.relative_to(ctx.run.root)
            raise ArmSkipped(f"{where} names adapters that are gone ({', '.join(missing)}); rerun route")
        return spec
    return spec_from_run(ctx.run, base_model=ctx.model_label)


def sub_spec(spec: RouterSpec, names: list[str]) -> RouterSpec:
    """The router restricted to the capabilities `names` (relabelled A, B, …; base last)."""
    opts = {o.name: o for o in spec.options}
    caps = [(n, opts[n].description, Path(opts[n].adapter_path) if opts[n].adapter_path else None) for n in names]
    examples = {n: (opts[n].example_id or "", opts[n].example) for n in names if opts[n].example}
    options = make_options(caps, examples)  # type: ignore[arg-type]
    return spec.model_copy(update={"options": options})


def build_router(ctx: EvalContext, spec: RouterSpec) -> Router:
    """The injected router factory's router (tests), else the label-logit router over the policy; skip if neither."""
    if ctx.router_factory is not None:
        return ctx.router_factory(spec)
    try:
        return make_router(spec, ctx.client, ctx.policy_cfg)
    except UserError as exc:
        raise ArmSkipped(str(exc)) from None


def route_counts(ctx: EvalContext, relpath: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in ctx.store(relpath).latest().values():
        name = route_of(record)
        counts[name] = counts.get(name, 0) + 1
    return counts


def routed_arm(
    ctx: EvalContext,
    name: str,
    relpath: str,
    spec: RouterSpec,
    budgets: dict[str, Any],
    *,
    adapters: list[str],
    route_calls: int,
    description: str,
    details: dict[str, Any] | None = None,
) -> ArmEntry:
    """A routed arm's entry: budget = the sum over the adapters' budgets; details: where its episodes went, the
    router's calls, each adapter's budget, the router (and the arm's own `details`)."""
    return ArmEntry(
        name=name,
        relpath=relpath,
        budget=sum(b.rollouts for b in budgets.values()),
        adapters=adapters,
        description=description,
        details={
            "routes": route_counts(ctx, relpath),
            "route_calls": route_calls,
            "adapter_budgets": {n: b.as_dict() for n, b in budgets.items()},
            "router": {
                "labels": dict(zip(spec.labels, spec.names, strict=True)),
                "base_model": spec.base_model,
                "file": str(ctx.run.router) if ctx.run.router.exists() else None,
            },
            **(details or {}),
        },
    )


def run(ctx: EvalContext) -> ArmEntry:
    spec = trace_spec(ctx)
    names = [n for n in spec.names if n != BASE]
    for name, path in spec.adapters.items():
        ctx.ensure_adapter(name, path)
    budgets = {n: ctx.adapter_budget(n) for n in names}
    relpath = EvaluateLayout.arm(NAME)
    identity = ctx.identity(
        arm=NAME,
        router=spec.model_dump(mode="json", exclude={"created_at"}),
        adapters={n: adapter_stamp(p) for n, p in spec.adapters.items()},
    )
    claim(ctx, relpath, identity)
    routed = RoutedClient(ctx.client, build_router(ctx, spec), allowed=set(spec.names))
    ctx.evaluate(NAME, relpath, router=routed, metadata={"arm": NAME})
    out = routed_arm(
        ctx,
        NAME,
        relpath,
        spec,
        budgets,
        adapters=names,
        route_calls=routed.route_calls,
        description="Routed adapters: the frozen base model picks one adapter (or base) per task from the first user "
        "message; that adapter serves the whole episode.",
    )
    if ctx.ecfg.curve.enabled:
        out.curve.extend(capability_curve(ctx, spec, names, identity, budgets))
        out.curve.extend(checkpoint_curve(ctx, spec, names, identity, budgets))
    return out


def capability_curve(
    ctx: EvalContext, spec: RouterSpec, names: list[str], identity: dict[str, Any], budgets: dict[str, Any]
) -> list[CurveEntry]:
    """One point per prefix of the capabilities: the router over the first m of them, at their summed budget."""
    points = []
    for m in range(1, len(names)):
        part = sub_spec(spec, names[:m])
        point = EvaluateLayout.curve(NAME, m)
        claim(ctx, point, {**identity, "arm": NAME, "router": part.model_dump(mode="json", exclude={"created_at"})})
        routed_m = RoutedClient(ctx.client, build_router(ctx, part), allowed=set(part.names))
        ctx.evaluate(
            f"trace@{m} capabilities",
            point,
            trials=ctx.ecfg.curve.trials,
            router=routed_m,
            metadata={"arm": NAME, "capabilities": names[:m]},
        )
        budget = sum(budgets[n].rollouts for n in names[:m])
        points.append(
            CurveEntry(
                arm=NAME,
                budget=budget,
                relpath=point,
                trials=ctx.ecfg.curve.trials,
                label=f"{m} capabilities",
                series="capability prefixes",
            )
        )
    return points


def checkpoint_adapters(ctx: EvalContext, steps: dict[str, int]) -> dict[str, Path] | None:
    """Each capability's adapter at `steps[name]`, served as `<name>_step<N>`: the copy the train stage kept
    (`train/<name>/kept/step-N`), else the Trainer checkpoint still on disk (`train/<name>/checkpoints/checkpoint-N`);
    None when one of them has neither."""
    served = {}
    for name, step in steps.items():
        work = ctx.run.train_work(name)
        kept = kept_checkpoints(work.kept).get(step)
        folder = kept or work.checkpoints / f"checkpoint-{step}"
        if kept is None and not (is_complete(folder) and AdapterLayout(folder).is_peft()):
            return None
        served[f"{name}_step{step}"] = folder
    return served


def checkpoint_curve(
    ctx: EvalContext, spec: RouterSpec, names: list[str], identity: dict[str, Any], budgets: dict[str, Any]
) -> list[CurveEntry]:
    """One point per curve fraction f at which every adapter kept a checkpoint at step max(1, round(f · its steps)):
    the same router (every task takes the same route) served by those checkpoints, at the rollouts the adapters had
    generated by then. Fractions without such checkpoints are skipped (the train stage keeps them at
    `train.keep_fractions`, by default the curve's own; older runs have only the Trainer's last `save_total_limit`)."""
    points = []
    for fraction in ctx.ecfg.curve.fractions:
        at = {n: steps_at_fractions(budgets[n].steps or 0, [fraction]) for n in names}
        if not all(at.values()):
            continue  # the fraction is an adapter's last step (or it has none)
        steps = {n: found[0] for n, found in at.items()}
        served = checkpoint_adapters(ctx, steps)
        if served is None:
            continue
        for name, path in served.items():
            ctx.ensure_adapter(name, path)
        label = "checkpoints " + ", ".join(f"{n}@{s}" for n, s in steps.items())
        point = EvaluateLayout.curve(NAME, f"steps{'-'.join(str(steps[n]) for n in names)}")
        claim(ctx, point, {**identity, "arm": NAME, "adapters": {n: adapter_stamp(p) for n, p in served.items()}})
        routed = RoutedClient(
            ctx.client,
            build_router(ctx, spec),
            allowed=set(spec.names),
            served={n: f"{n}_step{s}" for n, s in steps.items()},
        )
        ctx.evaluate(
            f"trace@{label}",
            point,
            trials=ctx.ecfg.curve.trials,
            router=routed,
            metadata={"arm": NAME, "checkpoint_steps": steps},
        )
        budget = sum(budgets[n].until(s) for n, s in steps.items())
        points.append(
            CurveEntry(
                arm=NAME, budget=budget, relpath=point, trials=ctx.ecfg.curve.trials, label=label, series="checkpoints"
            )
        )
    return points
