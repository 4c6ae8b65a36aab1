"""The arms of the comparison, one module each, looked up by name in `ARMS_BY_NAME`. Each runs its agent variant on
the same held-out (task, trial) episodes into its own JSONL (`evaluate/arms/<arm>.jsonl`, resumable), and returns
what it consumed to be built (its rollout budget) and its score-vs-budget points. An arm that cannot run raises
`ArmSkipped` with the reason.

| arm              | agent                                                          | training rollouts           |
|------------------|----------------------------------------------------------------|-----------------------------|
| base             | the base model                                                 | 0                           |
| trace            | routed once per task from the first user message → 1 adapter   | Σ capability adapters       |
| trace_guarded    | trace; an adapter worse than base on its routed train tasks → base | Σ capability adapters   |
| grpo_target      | one adapter, GRPO on the target's train split                  | = TRACE (matched steps)     |
| gepa             | base + GEPA-optimised capability descriptions in the prompt    | GEPA metric calls ≤ TRACE   |
| single_best      | the one capability adapter that scores best without the test   | that adapter's              |
| multi_capability | one adapter on a uniform mix of all capability environments    | = TRACE (matched steps)     |

A new arm is a module with `NAME` and `run(ctx) -> ArmEntry`, listed in `ARM_MODULES` (and its name in the evaluate
config's `ARMS`, which a test keeps equal to this registry).
"""

from __future__ import annotations

from trace_rl.evaluate.arms import base, gepa, grpo_target, multi_capability, single_best, trace, trace_guarded
from trace_rl.evaluate.arms.common import ArmFunction

ARM_MODULES = (base, trace, trace_guarded, grpo_target, gepa, single_best, multi_capability)
ARMS_BY_NAME: dict[str, ArmFunction] = {module.NAME: module.run for module in ARM_MODULES}

__all__ = ["ARMS_BY_NAME", "ARM_MODULES", "ArmFunction"]
