"""The `trace_guarded` arm: TRACE with a held-in regression guard (ours, not in the paper; evaluate/guard.py).

First the `trace` arm's router over every trained adapter, and the base model, play the target's *train* tasks
(`guard.tasks` × `guard.trials`, the same trial seeds; `evaluate/guard/{trace,base}.jsonl`, shared by every
evaluation of the run, `--out` ones included, so each test range sees the same verdicts). An adapter is kept when,
on the train tasks the router sends to it, it does at least `guard.min_delta` better than base (paired). Then the same
router plays the held-out tasks, and a task it sends to a dropped adapter is served by the base model. The kept
adapters' routing is unchanged, so the guard's evidence is about the kind of tasks they go on to serve.

Budget: the sum over every trained adapter (all were trained, kept or not); the guard's episodes are reported apart
as selection rollouts, like the single-best arm's. With every adapter kept it plays what `trace` plays.
"""

from __future__ import annotations

from trace_rl.artifacts.evaluation import ArmEntry
from trace_rl.artifacts.layout import EvaluateLayout
from trace_rl.artifacts.router import BASE
from trace_rl.evaluate.arms.common import adapter_stamp, claim
from trace_rl.evaluate.arms.trace import build_router, routed_arm, trace_spec
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext, RoutedClient
from trace_rl.evaluate.guard import judge

NAME = "trace_guarded"


def run(ctx: EvalContext) -> ArmEntry:
    if ctx.split == "train":
        raise ArmSkipped("the held-in guard plays the train split, which is the split evaluated here")
    spec = trace_spec(ctx)
    names = [n for n in spec.names if n != BASE]
    for name, path in spec.adapters.items():
        ctx.ensure_adapter(name, path)
    guard = ctx.ecfg.guard
    tasks = ctx.train_tasks()[: guard.tasks]
    router = build_router(ctx, spec)
    who = {
        "router": spec.model_dump(mode="json", exclude={"created_at"}),
        "adapters": {n: adapter_stamp(p) for n, p in spec.adapters.items()},
    }
    held_in = {"split": "train", "trials": guard.trials, "tasks": len(tasks)}
    files = {"trace": EvaluateLayout.guard("trace"), BASE: EvaluateLayout.guard(BASE)}
    claim(ctx, files["trace"], ctx.identity(arm=NAME, guard="trace", **who, **held_in), shared=True)
    claim(ctx, files[BASE], ctx.identity(arm=NAME, guard=BASE, adapter=None, **held_in), shared=True)
    routed_train = RoutedClient(ctx.client, router, allowed=set(spec.names))
    ctx.evaluate(
        "guard: routed on train",
        files["trace"],
        tasks=tasks,
        split="train",
        trials=guard.trials,
        router=routed_train,
        metadata={"arm": NAME, "guard": "trace"},
        shared=True,
    )
    ctx.evaluate(
        "guard: base on train",
        files[BASE],
        tasks=tasks,
        split="train",
        trials=guard.trials,
        metadata={"arm": NAME, "guard": BASE},
        shared=True,
    )
    e = ctx.ecfg
    routed_records = ctx.store(files["trace"], shared=True).latest()
    base_records = ctx.store(files[BASE], shared=True).latest()
    verdicts = judge(
        routed_records,
        base_records,
        names,
        guard,
        samples=e.samples,
        seed=e.bootstrap_seed,
        level=e.level,
    )
    for v in verdicts:
        ctx.echo(f"guard: {v.adapter} {'kept' if v.kept else 'dropped'} ({v.reason})")
    kept = [v.adapter for v in verdicts if v.kept]

    relpath = EvaluateLayout.arm(NAME)
    claim(ctx, relpath, ctx.identity(arm=NAME, **who, guard=guard.model_dump(mode="json"), kept=kept))
    routed = RoutedClient(
        ctx.client, router, allowed={*kept, BASE}, fallback_note="'{name}' dropped by the held-in guard; base used"
    )
    ctx.evaluate(NAME, relpath, router=routed, metadata={"arm": NAME})
    budgets = {n: ctx.adapter_budget(n) for n in names}
    spent = len(routed_records) + len(base_records)  # one per task and trial, counted from the files
    return routed_arm(
        ctx,
        NAME,
        relpath,
        spec,
        budgets,
        adapters=kept,
        route_calls=routed.route_calls + routed_train.route_calls,
        description="TRACE's router over every adapter; a task routed to an adapter that did worse than base on the "
        "train tasks routed to it is served by the base model.",
        details={
            "guard": {
                **guard.model_dump(mode="json"),
                "train_tasks": len(tasks),
                "kept": kept,
                "dropped": [v.adapter for v in verdicts if not v.kept],
                "verdicts": [v.as_dict() for v in verdicts],
                "selection_rollouts": spent,
                "files": files,
            },
        },
    )
