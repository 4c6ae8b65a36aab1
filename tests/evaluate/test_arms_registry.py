"""The arms registry and the evaluate config's `ARMS` name the same arms, in the same order."""

from __future__ import annotations

from trace_rl.config.evaluate import ARMS
from trace_rl.evaluate.arms import ARM_MODULES, ARMS_BY_NAME


def test_every_configurable_arm_is_registered_and_every_registered_arm_is_configurable() -> None:
    assert tuple(ARMS_BY_NAME) == tuple(ARMS)
    assert all(ARMS_BY_NAME[m.NAME] is m.run for m in ARM_MODULES)
