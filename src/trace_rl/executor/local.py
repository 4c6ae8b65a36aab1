"""`LocalExecutor`: today's behaviour — episodes on the rollout engine's event loop, jobs one after the other."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from trace_rl.engine.runner import in_process
from trace_rl.executor.base import EpisodeFn, WorkJob

if TYPE_CHECKING:
    from trace_rl.engine.runner import EpisodeFactory


class LocalExecutor:
    """In process: `concurrency` episodes in flight on one event loop; jobs sequentially, first error raised."""

    kind = "local"

    @asynccontextmanager
    async def episodes(self, factory: EpisodeFactory, concurrency: int) -> AsyncIterator[tuple[EpisodeFn, int]]:
        async with in_process(factory, concurrency) as slots:
            yield slots

    def run_jobs(self, jobs: Sequence[WorkJob[Any]]) -> list[Any]:
        return [job.fn() for job in jobs]

    def close(self) -> None:
        return None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
