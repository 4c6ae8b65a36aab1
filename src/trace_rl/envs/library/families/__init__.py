"""The library's task families and `make_task(family, seed)`, the one entry point that turns a seed into a task.

Each family module has `NAME`, `CAPABILITY` (one of the paper's capability types) and `generate(rng, db) -> Draft`,
which shapes a private copy of the world of `seed` and returns the scenario, gold actions and facts to communicate.
The same (family, seed) always gives the same task, byte for byte.
"""

from __future__ import annotations

import random
from types import ModuleType

from trace_rl.envs.library.families import (
    authenticated_write,
    copy_selection,
    lookup_answer,
    multi_step,
    precondition_refusal,
)
from trace_rl.envs.library.families.common import build_task
from trace_rl.envs.library.world import world
from trace_rl.errors import UserError
from trace_rl.types import Task

_MODULES: tuple[ModuleType, ...] = (
    lookup_answer,
    authenticated_write,
    precondition_refusal,
    multi_step,
    copy_selection,
)
FAMILY_MODULES: dict[str, ModuleType] = {m.NAME: m for m in _MODULES}
FAMILIES: tuple[str, ...] = tuple(FAMILY_MODULES)
CAPABILITY_TYPES: dict[str, str] = {m.NAME: m.CAPABILITY for m in _MODULES}
FAMILY_LEVELS: dict[str, int] = {m.NAME: m.LEVEL for m in _MODULES}


def make_task(family: str, seed: int) -> Task:
    """The task of `family` for `seed`, in the world of `seed`."""
    module = FAMILY_MODULES.get(family)
    if module is None:
        raise UserError(f"unknown library task family '{family}' (known: {', '.join(FAMILIES)})")
    base = world(seed)
    scenario = base.model_copy(deep=True)
    draft = module.generate(random.Random(f"trace-rl/library/task/{family}/{seed}"), scenario)
    return build_task(family=family, seed=seed, capability=module.CAPABILITY, base=base, scenario=scenario, draft=draft)


__all__ = ["CAPABILITY_TYPES", "FAMILIES", "FAMILY_LEVELS", "make_task"]
