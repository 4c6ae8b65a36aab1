"""The `single_best` arm: the one capability adapter that scores best, for every task. Selection (`single_best.select`):
`train_eval` (the train stage's before/after held-out gain, no extra rollouts), `train` (each adapter on tasks of the
target's train split, charged as selection rollouts) or `test` (on the test split itself: an upper bound that leaks)."""

from __future__ import annotations

from typing import Any

from trace_rl.artifacts.adapters import capability_adapters, read_eval
from trace_rl.artifacts.evaluation import ArmEntry
from trace_rl.artifacts.layout import EVAL_AFTER_FILE, EVAL_BEFORE_FILE, AdapterLayout, EvaluateLayout
from trace_rl.evaluate.arms.common import adapter_arm, adapter_stamp, claim, why_no_adapters
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext

NAME = "single_best"


def success_and_reward(ctx: EvalContext, relpath: str) -> tuple[float, float]:
    """(success rate, mean reward) of the scored episodes in `relpath`."""
    records = [r for r in ctx.store(relpath).latest().values() if r.get("infra_error") is None]
    if not records:
        return 0.0, 0.0
    return (
        sum(bool(r.get("success")) for r in records) / len(records),
        sum(float(r.get("reward") or 0.0) for r in records) / len(records),
    )


def run(ctx: EvalContext) -> ArmEntry:
    adapters = capability_adapters(ctx.run)
    if not adapters:
        raise ArmSkipped(f"no trained capability adapters ({why_no_adapters(ctx.run)})")
    how = ctx.ecfg.single_best
    scores: dict[str, Any] = {}
    spent = 0
    if how.select == "train_eval":
        for name, folder in adapters.items():
            adapter = AdapterLayout(folder)
            before, after = read_eval(adapter.eval_before), read_eval(adapter.eval_after)
            if before is None or after is None:
                continue
            scores[name] = after.success_rate - before.success_rate
        if not scores:
            raise ArmSkipped(f"select=train_eval: no adapter has {EVAL_BEFORE_FILE} and {EVAL_AFTER_FILE}")
    else:
        if how.select == "train":
            tasks, split, trials = ctx.train_tasks()[: how.tasks], "train", how.trials
        else:
            tasks, split, trials = ctx.tasks, ctx.split, ctx.ecfg.trials
        for name, folder in adapters.items():
            ctx.ensure_adapter(name, folder)
            relpath = EvaluateLayout.single_best(how.select, name)
            claim(
                ctx,
                relpath,
                ctx.identity(arm=NAME, adapter=name, adapter_stamp=adapter_stamp(folder), split=split, trials=trials),
            )
            ctx.evaluate(
                f"single_best select {name}",
                relpath,
                tasks=tasks,
                split=split,
                trials=trials,
                adapter=name,
                metadata={"arm": NAME, "selection": how.select},
            )
            scores[name] = success_and_reward(ctx, relpath)
            spent += len(tasks) * trials

    def rank(name: str) -> tuple[float, ...]:
        score = scores.get(name)
        if score is None:
            return (-1.0, -1.0)
        return tuple(score) if isinstance(score, tuple) else (float(score),)

    best = max(adapters, key=rank)  # ties: the first adapter in name order
    details = {
        "selection": {
            "rule": how.select,
            "scores": scores,
            "chosen": best,
            "selection_rollouts": spent,
            "leaks_test": how.select == "test",
        }
    }
    description = f"The single capability adapter '{best}' for every task (chosen by {how.select})."
    if how.select == "test":  # its selection episodes are the arm's: the same tasks, trials and seeds
        budget = ctx.adapter_budget(best)
        return ArmEntry(
            name=NAME,
            relpath=EvaluateLayout.single_best(how.select, best),
            budget=budget.rollouts,
            adapters=[best],
            description=description,
            details={**details, "budget": budget.as_dict()},
        )
    return adapter_arm(ctx, NAME, best, adapters[best], ctx.adapter_budget(best), description, details)
