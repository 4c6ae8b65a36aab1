"""Generator `toolsandbox_scenarios`: capability environments from ToolSandbox evidence (no LLM).

TRACE synthesizes one environment per lacking capability over the target's tools (Kang et al. 2026, §3.4). On
ToolSandbox trace-rl takes the families (base scenario + its augmentations) of the evidence tasks, all on the train
side of the family split, and plays their scenarios: the same world, tools, milestones and minefields, so the reward
is ToolSandbox's own similarity (`RewardSpec.source = "target"`) and success is similarity 1.0. The difficulty knob
chooses which augmentations join the pool (ToolSandbox's own robustness axes):

    0: base scenarios only; 1: + 3 distraction tools; 2: + 10 distraction tools and all tools;
    3 and 4: + scrambled tool names, tool descriptions, argument descriptions and argument types.

Departure: every task is a whole ToolSandbox scenario of an evidence family, not a new task that isolates the
capability (Definition 2); the environment is the evidence's slice of the target, closer to GRPO on those families.
Test-split families never enter the pool (the family split keeps augmentations on one side).
"""

from __future__ import annotations

import random

from trace_rl.artifacts.environments import EnvSpec
from trace_rl.envs.base import Domain
from trace_rl.envs.synthetic.generators import finish
from trace_rl.errors import UserError
from trace_rl.types import Task

KNOB_VARIANTS: dict[int, tuple[str, ...]] = {
    0: ("base",),
    1: ("base", "3_distraction_tools"),
    2: ("base", "3_distraction_tools", "10_distraction_tools", "all_tools"),
}
ALL_VARIANTS = "*"


def variants_for(knob: int) -> tuple[str, ...] | str:
    return KNOB_VARIANTS.get(knob, ALL_VARIANTS)


class ToolSandboxScenarios:
    """params: `families` (base scenario names, each a train-split family). Seed s draws one scenario of the pool."""

    def __init__(self, spec: EnvSpec, target: Domain) -> None:
        scenarios = getattr(target, "scenarios", None)
        if scenarios is None:
            raise UserError(f"capability env '{spec.name}': toolsandbox_scenarios needs a toolsandbox target")
        families = set(spec.generator.params.get("families") or [])
        if not families:
            raise UserError(f"capability env '{spec.name}': toolsandbox_scenarios needs params.families")
        from trace_rl.envs.toolsandbox.domain import family_split

        leaked = sorted(f for f in families if family_split(f) != "train")
        if leaked:
            raise UserError(f"capability env '{spec.name}': families {leaked[:3]} are on the test side of the split")
        allowed = variants_for(spec.generator.difficulty)
        self.spec = spec
        self.target = target
        self.pool = sorted(
            name
            for name, s in scenarios.items()
            if s["base_scenario"] in families
            and not s["needs_network"]
            and (allowed == ALL_VARIANTS or s["variant"] in allowed)
        )
        if not self.pool:
            raise UserError(f"capability env '{spec.name}': no offline scenario in families {sorted(families)[:3]}")
        self._by_name = {t.metadata["scenario"]: t for t in _all_tasks(target)}

    def make(self, seed: int, salt: int = 0) -> Task:
        rng = random.Random(f"trace-rl/synthetic/{self.spec.name}/{seed}/{salt}")
        name = self.pool[(self.spec.generator.seed_base + seed + rng.randrange(len(self.pool))) % len(self.pool)]
        task = self._by_name[name]
        return finish(task, self.spec, seed, {"family": task.metadata["family"], "scenario": name})


def _all_tasks(target: Domain) -> list[Task]:
    """Every offline scenario as a task (the target's own task set may hold only the base scenarios)."""
    from trace_rl.config import EnvConfig
    from trace_rl.envs.registry import load_domain

    name = "toolsandbox:all_offline"
    cfg = EnvConfig(name=name, data_dir=getattr(target, "root", None))
    return load_domain(name, cfg).tasks("all")


__all__ = ["KNOB_VARIANTS", "ToolSandboxScenarios", "variants_for"]
