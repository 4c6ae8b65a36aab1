"""The `base` arm: the base model, no adapter, on the held-out tasks (0 training rollouts)."""

from __future__ import annotations

from trace_rl.evaluate.arms.common import ArmOutput, arm_path, claim
from trace_rl.evaluate.episodes import EvalContext

NAME = "base"


def run(ctx: EvalContext) -> ArmOutput:
    relpath = arm_path(NAME)
    claim(ctx, relpath, ctx.identity(arm=NAME, adapter=None))
    ctx.evaluate(NAME, relpath, metadata={"arm": NAME})
    return ArmOutput(NAME, relpath, description="The base model, no adapter.")
