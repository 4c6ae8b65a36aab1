"""Generator `target_reseed`: capability environments over an imported target's fresh tasks (no LLM).

TRACE's first generator re-uses the target's own task generator where one exists (Kang et al. 2026, §3.4). An
imported OpenEnv or verifiers environment offers exactly that and nothing more: tasks by seed (OpenEnv's
`reset(seed=…)`) or by row (a verifiers taskset), with no gold solution and no way to ask for a task that needs one
capability. So seed s of this environment plays the target's fresh task `seed_base + s` (fresh seeds past every
test seed; rows after train and test), scored by the target's own reward (`RewardSpec.source = "target"`). Where the
target has a finite pool (rows), seeds wrap around it, and the salt of a refused draw moves to the next row.

What makes it capability-targeted is only the hinted prompt (the capability's guidance on a fraction of episodes)
and the calibration gates. Departure: no task is built to need the capability (Definition 2); like
`toolsandbox_scenarios`, this is closer to GRPO on fresh target tasks, and the spec says so in its provenance.
"""

from __future__ import annotations

from trace_rl.artifacts.environments import EnvSpec
from trace_rl.envs.base import Domain, ReseedableDomain
from trace_rl.envs.synthetic.generators import finish
from trace_rl.errors import UserError
from trace_rl.types import Task

SALT_STRIDE = 7_919  # a refused draw's alternative: far from the seeds next to it


class TargetReseed:
    """Seed s → the target's fresh task (seed_base + s + salt · SALT_STRIDE), wrapped into a finite pool."""

    def __init__(self, spec: EnvSpec, target: Domain) -> None:
        if not isinstance(target, ReseedableDomain):
            raise UserError(f"capability env '{spec.name}': target_reseed needs a target with fresh tasks")
        count = target.fresh_count()
        if count is not None and count <= 0:
            raise UserError(f"capability env '{spec.name}': the target '{target.name}' has no fresh tasks")
        self.spec = spec
        self.target = target
        self.count = count

    def index(self, seed: int, salt: int = 0) -> int:
        raw = self.spec.generator.seed_base + int(seed) + salt * SALT_STRIDE
        return raw % self.count if self.count is not None else raw

    def make(self, seed: int, salt: int = 0) -> Task:
        index = self.index(seed, salt)
        task = self.target.fresh_task(index)
        return finish(task, self.spec, seed, {"fresh_index": index})


__all__ = ["TargetReseed"]
