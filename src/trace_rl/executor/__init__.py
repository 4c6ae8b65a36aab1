"""Executors: run a stage's episodes and jobs in this process (`local`) or on a Ray cluster (`ray`).

`make_executor(cfg.executor, stage)` picks one from the config's `executor` section (docs/scale-out.md).
"""

from __future__ import annotations

from trace_rl.config import ExecutorConfig
from trace_rl.executor.base import EpisodeFn, Executor, WorkJob
from trace_rl.executor.local import LocalExecutor


def make_executor(cfg: ExecutorConfig | None = None, stage: str | None = None) -> Executor:
    """The executor for `stage` (its entry in `executor.stages`, else `executor.kind`); local by default."""
    cfg = cfg or ExecutorConfig()
    if stage is not None:
        cfg = cfg.for_stage(stage)
    if cfg.kind == "local":
        return LocalExecutor()
    from trace_rl.executor.ray_executor import RayExecutor, import_ray

    import_ray()  # a missing package is a one-line error before any work
    return RayExecutor(cfg)


__all__ = ["EpisodeFn", "Executor", "ExecutorConfig", "LocalExecutor", "WorkJob", "make_executor"]
