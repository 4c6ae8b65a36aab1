"""Synthesized capability environments (`envs/<capability>/` folders written by `trace-rl synthesize`).

`load_domain("<dir>", cfg)` (registry name `synthetic:<dir>`) and `load_capability_env(dir)` load one as a
`CapabilityEnvironment` (also a `Domain`); `load_train_env(dir)` wraps it for stage 3's `TrainEnv` protocol.
`cfg.options` may resize the splits: `{"n_train": 128, "n_test": 32}`.
"""

from __future__ import annotations

from pathlib import Path

from trace_rl.config import EnvConfig
from trace_rl.envs.synthetic.environment import (
    HINT_CLOSE,
    HINT_OPEN,
    CapabilityEnvironment,
    hint_block,
    is_hinted,
    load_capability_env,
    strip_hint,
)
from trace_rl.envs.synthetic.generated import GeneratedTask
from trace_rl.envs.synthetic.train_env import CapabilityTrainEnv, load_train_env
from trace_rl.errors import UserError


def load_domain(rest: str, cfg: EnvConfig) -> CapabilityEnvironment:
    """`synthetic:<dir>`: the capability environment in folder `<dir>`."""
    if not rest:
        raise UserError("environment 'synthetic' needs a folder: synthetic:runs/<name>/envs/<capability>")
    env = load_capability_env(Path(rest))
    sizes = {k: cfg.options[k] for k in ("n_train", "n_test") if k in cfg.options}
    if sizes:
        splits = env.spec.splits.model_copy(
            update={
                "train": (env.spec.splits.train[0], int(sizes.get("n_train", env.spec.splits.train[1]))),
                "test": (env.spec.splits.test[0], int(sizes.get("n_test", env.spec.splits.test[1]))),
            }
        )
        env.spec = env.spec.model_copy(update={"splits": type(splits).model_validate(splits.model_dump())})
    return env


__all__ = [
    "HINT_CLOSE",
    "HINT_OPEN",
    "CapabilityEnvironment",
    "CapabilityTrainEnv",
    "GeneratedTask",
    "hint_block",
    "is_hinted",
    "load_capability_env",
    "load_domain",
    "load_train_env",
    "strip_hint",
]
