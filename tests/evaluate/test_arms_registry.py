"""The arms registry and the evaluate config's `ARMS` name the same arms, in the same order; each arm module has its
own name and a `run(ctx)` of the documented signature."""

from __future__ import annotations

import inspect

from trace_rl.config.evaluate import ARMS
from trace_rl.evaluate.arms import ARM_MODULES, ARMS_BY_NAME


def test_every_configurable_arm_is_registered_and_every_registered_arm_is_configurable() -> None:
    assert tuple(ARMS_BY_NAME) == tuple(ARMS)


def test_each_arm_module_has_a_unique_name_and_a_run_of_ctx() -> None:
    names = [m.NAME for m in ARM_MODULES]
    assert len(names) == len(set(names)), names
    for module in ARM_MODULES:
        params = list(inspect.signature(module.run).parameters)
        assert params == ["ctx"], (module.NAME, params)
        assert inspect.signature(module.run).return_annotation in ("ArmEntry", "ArmEntry | None"), module.NAME
