"""The `grpo_target` arm: one adapter trained with GRPO directly on the target's train split at TRACE's rollout
budget (matched steps; `evaluate/baselines.py`), then evaluated like any single adapter. With the curve on, the
checkpoints kept at the curve fractions give the score-vs-budget points."""

from __future__ import annotations

import functools
from typing import Any

from trace_rl.artifacts.adapters import capability_adapters, is_done
from trace_rl.artifacts.evaluation import ArmEntry, CurveEntry
from trace_rl.artifacts.layout import GRPO_TARGET_DIR, EvaluateLayout
from trace_rl.config.train import steps_at_fractions
from trace_rl.evaluate.arms.common import adapter_arm, adapter_stamp, claim, need_budget
from trace_rl.evaluate.baselines import matched_config, target_train_env, train_baseline
from trace_rl.evaluate.budget import adapter_budget
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext
from trace_rl.training.checkpoints import kept_checkpoints
from trace_rl.training.envs import domain_split_env

NAME = "grpo_target"


def run(ctx: EvalContext) -> ArmEntry:
    layout = ctx.folder(shared=True)
    adapter, work = layout.baseline(GRPO_TARGET_DIR)
    adapter_dir, work_dir = adapter.folder, work.folder
    matched: dict[str, Any] = {}
    if not is_done(adapter_dir):
        if not ctx.ecfg.train_baselines:
            raise ArmSkipped(f"no GRPO-on-target adapter in {adapter_dir} and train_baselines is off")
        total = need_budget(ctx)
        tcfg = matched_config(ctx, capability_adapters(ctx.run), total)
        recipe = functools.partial(domain_split_env, GRPO_TARGET_DIR, ctx.cfg.env, "train")
        train_baseline(ctx, target_train_env(ctx), tcfg, adapter_dir, work_dir, recipe=recipe)
        matched = {"target_total": total, "steps": tcfg.max_steps}
    budget = adapter_budget(GRPO_TARGET_DIR, adapter_dir, work_dir)
    out = adapter_arm(
        ctx,
        NAME,
        GRPO_TARGET_DIR,
        adapter_dir,
        budget,
        "One adapter trained with GRPO directly on the target's train split, same rollout budget.",
        {"matched": matched or None, "train_split": "train"},
    )
    if ctx.ecfg.curve.enabled and budget.steps:
        wanted = set(steps_at_fractions(budget.steps, ctx.ecfg.curve.fractions))
        kept = kept_checkpoints(work.kept, layout.baseline_checkpoints(GRPO_TARGET_DIR))  # the second: older runs
        for step, folder in kept.items():
            if step not in wanted:
                continue
            name = f"{GRPO_TARGET_DIR}_step{step}"
            ctx.ensure_adapter(name, folder)
            point = EvaluateLayout.curve(NAME, step)
            claim(ctx, point, ctx.identity(arm=NAME, adapter=name, adapter_stamp=adapter_stamp(folder)))
            ctx.evaluate(
                f"grpo_target@step{step}",
                point,
                trials=ctx.ecfg.curve.trials,
                adapter=name,
                metadata={"arm": NAME, "step": step},
            )
            out.curve.append(
                CurveEntry(
                    arm=NAME,
                    budget=budget.until(step),
                    relpath=point,
                    trials=ctx.ecfg.curve.trials,
                    label=f"step {step}",
                )
            )
    return out
