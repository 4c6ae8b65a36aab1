"""The `Executor` protocol: where a stage's episodes and jobs run, behind one interface.

- `episodes(factory, concurrency)`: an async context that yields `(run_episode, slots)`. The rollout engine
  (`engine.runner.run_rollout`) keeps everything else — resume, the single JSONL writer, progress, the infra streak —
  and only awaits `run_episode(job)` for each pending job, with at most `slots` in flight. The local executor runs
  the episode on the engine's own event loop; the Ray executor runs it in a worker actor and awaits the result.
- `run_jobs(jobs)`: independent jobs (one per capability's training), each asking for CPUs and GPUs; values come back
  in job order. The local executor runs them one after the other and stops at the first error (today's behaviour);
  the Ray executor runs them in parallel, lets every job finish, then raises the first error.

Both write nothing themselves: the driver (the stage) stores every result through the same store code, so the run
directory is the same whichever executor ran the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from trace_rl.engine.runner import EpisodeExecutor, EpisodeFn

if TYPE_CHECKING:
    from trace_rl.engine.runner import EpisodeFactory

T = TypeVar("T")


@dataclass(frozen=True)
class WorkJob(Generic[T]):
    """One independent job: `fn()` (picklable for Ray), with the resources it asks for."""

    name: str
    fn: Callable[[], T]
    num_gpus: float = 0.0
    num_cpus: float = 1.0


@runtime_checkable
class Executor(EpisodeExecutor, Protocol):
    """Where episodes and jobs run (see the module docstring)."""

    kind: str

    def episodes(
        self, factory: EpisodeFactory, concurrency: int
    ) -> AbstractAsyncContextManager[tuple[EpisodeFn, int]]: ...

    def run_jobs(self, jobs: Sequence[WorkJob[Any]]) -> list[Any]: ...

    def close(self) -> None: ...
