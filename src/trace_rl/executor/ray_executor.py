"""`RayExecutor`: episodes in worker actors, jobs as Ray tasks with their own GPUs, results written by the driver.

Episodes: `num_workers` `EpisodeWorker` actors, each an async actor running up to `episodes_per_worker` episodes on
its own event loop. A session ships the episode factory once (`shipping.dumps`, model clients as recipes) as one
object-store entry; each actor deserializes it on first use and caches it by digest. The driver sends each pending
job to the least busy actor and awaits the trajectory, which the rollout engine then appends through its single
writer — so a (task, trial) is written once, when its one result arrives.

Lost workers: actors restart (`max_restarts`) and Ray re-runs the calls that were in flight on the restarted actor
(`max_task_retries`); if a call still fails because its actor is gone, the driver sends the job to another actor, up
to `max_retries` times, and after that records it as an infrastructure failure (retried by the next run). Jobs
(trainings) are Ray tasks with `max_retries`; a retried training resumes from its newest checkpoint.

Clusters: `address` None starts a local Ray instance for the command (and stops it after); "auto" or "ray://..."
joins an existing one; an already initialised Ray (a test fixture, a notebook) is used as it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

from trace_rl.config import ExecutorConfig
from trace_rl.errors import UserError
from trace_rl.executor.base import EpisodeFn, WorkJob
from trace_rl.executor.shipping import dumps, loads

if TYPE_CHECKING:
    from trace_rl.engine.plan import Job
    from trace_rl.engine.runner import EpisodeFactory
    from trace_rl.types import Trajectory


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "executor 'ray' needs the ray package: pip install -e '.[ray]' (or set executor.kind: local)"
        ) from None
    return ray


class EpisodeWorker:
    """A Ray actor (async): runs episodes of the factories it is sent, several at once on its event loop."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.factories: dict[str, EpisodeFactory] = {}
        self.loading: dict[str, asyncio.Lock] = {}

    async def factory(self, key: str, payload: list[Any]) -> EpisodeFactory:
        """The factory `key`, fetched from the object store and loaded on first use (also after a restart)."""
        if key not in self.factories:
            lock = self.loading.setdefault(key, asyncio.Lock())
            async with lock:
                if key not in self.factories:  # a local model loads off the event loop, once per factory
                    data = await payload[0]
                    self.factories[key] = await asyncio.to_thread(loads, data)
        return self.factories[key]

    async def run(self, key: str, payload: list[Any], job: Job) -> Trajectory:
        """One episode. `payload` is `[ref]`: a reference inside a list is not fetched with every call."""
        factory = await self.factory(key, payload)
        return await factory.run(job)

    async def drop(self, key: str) -> None:
        factory = self.factories.pop(key, None)
        self.loading.pop(key, None)
        if factory is None:
            return
        for client in {id(c): c for c in (factory.client, factory.user_client, factory.judge) if c}.values():
            with suppress(Exception):
                await client.aclose()

    def pid(self) -> int:
        return os.getpid()


def call_job(payload: bytes) -> Any:
    """A Ray task: run one shipped job."""
    return loads(payload)()


def task_error(ray: Any, exc: BaseException) -> BaseException:
    """The exception raised inside a worker (a `UserError` stays one line); Ray's wrapper otherwise."""
    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
    if isinstance(cause, UserError):
        return UserError(str(cause))
    return cause if isinstance(cause, BaseException) else exc


class RayExecutor:
    """Episodes on worker actors, jobs as tasks (see the module docstring)."""

    kind = "ray"

    def __init__(self, cfg: ExecutorConfig) -> None:
        self.cfg = cfg
        self.started = False
        self.workers: list[Any] = []
        self.per_worker = 0
        self.lost = 0  # calls whose worker was lost even after Ray's retries (sent to another worker)
        self.dead: set[int] = set()  # workers gone for good (restarts used up)

    # -- cluster ------------------------------------------------------------------------------------------------------

    def connect(self) -> Any:
        ray = import_ray()
        if ray.is_initialized():
            return ray
        cfg = self.cfg
        runtime_env = dict(cfg.runtime_env)
        forwarded = {k: os.environ[k] for k in cfg.forward_env if k in os.environ}
        if cfg.address is not None and forwarded:  # a local instance inherits this process's environment anyway
            runtime_env["env_vars"] = {**forwarded, **runtime_env.get("env_vars", {})}
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING"}
        if runtime_env:
            kwargs["runtime_env"] = runtime_env
        try:
            if cfg.address is None:
                need = math.ceil(cfg.num_workers * cfg.cpus_per_worker)
                ray.init(num_cpus=cfg.num_cpus or max(os.cpu_count() or 1, need, 1), **kwargs)
            else:
                ray.init(address=cfg.address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = cfg.address or "a local instance"
            raise UserError(f"executor 'ray': cannot start or reach {where} ({str(exc).splitlines()[0]})") from None
        self.started = True
        return ray

    def close(self) -> None:
        if not self.workers and not self.started:
            return
        ray = import_ray()
        for worker in self.workers:
            with suppress(Exception):
                ray.kill(worker, no_restart=True)
        self.workers = []
        if self.started:
            ray.shutdown()
            self.started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- episodes -----------------------------------------------------------------------------------------------------

    def ensure_workers(self, per_worker: int) -> list[Any]:
        """`num_workers` actors, each taking `per_worker` episodes at once (recreated if that changes)."""
        ray = self.connect()
        if self.workers and self.per_worker == per_worker:
            return self.workers
        for worker in self.workers:
            with suppress(Exception):
                ray.kill(worker, no_restart=True)
        actor = ray.remote(EpisodeWorker).options(
            max_concurrency=per_worker,
            max_restarts=self.cfg.max_restarts,
            max_task_retries=self.cfg.max_retries,
            num_cpus=self.cfg.cpus_per_worker,
        )
        self.workers = [actor.remote(i) for i in range(self.cfg.num_workers)]
        self.per_worker = per_worker
        self.dead = set()
        return self.workers

    def worker_pids(self) -> list[int]:
        ray = import_ray()
        return list(ray.get([w.pid.remote() for w in self.workers]))

    @asynccontextmanager
    async def episodes(self, factory: EpisodeFactory, concurrency: int) -> AsyncIterator[tuple[EpisodeFn, int]]:
        from trace_rl.engine.runner import internal_failure

        ray = self.connect()
        per_worker = self.cfg.episodes_per_worker or max(1, math.ceil(concurrency / self.cfg.num_workers))
        workers = self.ensure_workers(per_worker)
        payload = dumps(factory)
        key = hashlib.sha1(payload).hexdigest()[:16]
        ref = ray.put(payload)
        busy = [0] * len(workers)
        lost_errors = (
            ray.exceptions.RayActorError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.NodeDiedError,
        )

        async def check(i: int) -> None:
            """After a lost call: is worker i restarting (Ray brings it back) or gone for good (never pick it again)?"""
            try:
                await asyncio.wait_for(asyncio.wrap_future(workers[i].pid.remote().future()), timeout=120)
            except ray.exceptions.RayActorError:
                self.dead.add(i)
            except (TimeoutError, ray.exceptions.RayError):
                pass

        async def run_episode(job: Job) -> Trajectory:
            started = time.time()
            tried: set[int] = set()
            last: BaseException | None = None
            for _ in range(self.cfg.max_retries + 1):
                alive = [i for i in range(len(workers)) if i not in self.dead]
                choices = [i for i in alive if i not in tried] or alive
                if not choices:
                    break
                i = min(choices, key=lambda j: busy[j])
                busy[i] += 1
                try:
                    return await workers[i].run.remote(key, [ref], job)
                except ray.exceptions.RayTaskError as exc:  # raised inside the episode code, not a lost worker
                    error = task_error(ray, exc)
                    if isinstance(error, UserError):
                        raise error from None
                    return internal_failure(job, factory.spec(job), error, started)
                except lost_errors as exc:  # the worker is gone even after Ray's own retries: another one
                    last = exc
                    tried.add(i)
                    self.lost += 1
                    await check(i)
                finally:
                    busy[i] -= 1
            lost = RuntimeError(f"episode workers lost ({len(tried)} tried, {len(self.dead)} gone; {last!r})")
            return internal_failure(job, factory.spec(job), lost, started)

        try:
            yield run_episode, per_worker * len(workers)
        finally:  # each worker forgets this factory (and closes its clients)
            drops = [w.drop.remote(key) for i, w in enumerate(workers) if i not in self.dead]
            with suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*drops, return_exceptions=True), timeout=30)

    # -- jobs ---------------------------------------------------------------------------------------------------------

    def run_jobs(self, jobs: Sequence[WorkJob[Any]]) -> list[Any]:
        """Every job in parallel as a Ray task; values in job order; the first error raised once all are finished."""
        if not jobs:
            return []
        ray = self.connect()
        remote = ray.remote(call_job)
        refs = {
            remote.options(
                num_gpus=job.num_gpus, num_cpus=job.num_cpus, max_retries=self.cfg.max_retries, name=job.name
            ).remote(dumps(job.fn)): i
            for i, job in enumerate(jobs)
        }
        values: list[Any] = [None] * len(jobs)
        errors: list[BaseException] = []
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                values[refs[done[0]]] = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                errors.append(task_error(ray, exc))
        if errors:
            raise errors[0]
        return values


__all__ = ["EpisodeWorker", "RayExecutor", "import_ray"]
