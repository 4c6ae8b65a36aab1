"""The `base` arm: the base model, no adapter, on the held-out tasks (0 training rollouts)."""

from __future__ import annotations

from trace_rl.artifacts.evaluation import ArmEntry
from trace_rl.artifacts.layout import EvaluateLayout
from trace_rl.evaluate.arms.common import claim
from trace_rl.evaluate.episodes import EvalContext

NAME = "base"


def run(ctx: EvalContext) -> ArmEntry:
    relpath = EvaluateLayout.arm(NAME)
    claim(ctx, relpath, ctx.identity(arm=NAME, adapter=None))
    ctx.evaluate(NAME, relpath, metadata={"arm": NAME})
    return ArmEntry(name=NAME, relpath=relpath, description="The base model, no adapter.")
