"""The `multi_capability` arm: one adapter trained with GRPO on a uniform mix of all the run's calibrated capability
environments (TRACE Table 3) at TRACE's rollout budget — `trace-rl train --mix`'s adapter, trained here when missing."""

from __future__ import annotations

import functools
from typing import Any

from trace_rl.artifacts.adapters import capability_adapters, is_done
from trace_rl.artifacts.evaluation import ArmEntry
from trace_rl.artifacts.layout import MIX_ADAPTER
from trace_rl.evaluate.arms.common import adapter_arm, need_budget
from trace_rl.evaluate.baselines import matched_config, mix_env, train_baseline
from trace_rl.evaluate.budget import adapter_budget
from trace_rl.evaluate.episodes import ArmSkipped, EvalContext
from trace_rl.training.selection import run_mix_env

NAME = "multi_capability"


def run(ctx: EvalContext) -> ArmEntry:
    adapter_dir, work_dir = ctx.run.adapter(MIX_ADAPTER).folder, ctx.run.train_work(MIX_ADAPTER).folder
    matched: dict[str, Any] = {}
    if not is_done(adapter_dir):
        if not ctx.ecfg.train_baselines:
            raise ArmSkipped(
                f"no multi-capability adapter in {adapter_dir} (trace-rl train --mix) and train_baselines is off"
            )
        total = need_budget(ctx)
        env = mix_env(ctx)
        tcfg = matched_config(ctx, capability_adapters(ctx.run), total)
        recipe = functools.partial(run_mix_env, ctx.run.root)
        train_baseline(ctx, env, tcfg, adapter_dir, work_dir, recipe=recipe)
        matched = {"target_total": total, "steps": tcfg.max_steps, "environments": len(env.envs)}
    budget = adapter_budget(MIX_ADAPTER, adapter_dir, work_dir)
    return adapter_arm(
        ctx,
        NAME,
        MIX_ADAPTER,
        adapter_dir,
        budget,
        "One adapter trained with GRPO on a uniform mix of all capability environments.",
        {"matched": matched or None},
    )
