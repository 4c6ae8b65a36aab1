"""The rollout engine: many episodes in flight on one asyncio loop, each with its own environment and user.

`run_rollout` takes every planned (task, trial) job, skips those whose latest stored trajectory is done (resume), and
runs the rest with `concurrency` workers. Each finished trajectory is appended to the run's JSONL store as soon as it
is ready (a single writer thread batches appends; one fsync per batch), so a kill at any instant loses at most the
episodes in flight and never writes one twice. Infrastructure failures are stored too: the next run retries them, and
the latest record of a key wins. After `stop_after_infra` consecutive infrastructure failures (a server that is down)
no new episodes start; the command reports what is left.

Per-episode failures are data: an unexpected exception inside an episode becomes an `internal:` infrastructure record
(retried, reported apart from agent failures). Only `UserError` (a systemic problem) stops the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import time
import traceback
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from trace_rl.artifacts.store import JsonlStore
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.plan import Job, pending_jobs
from trace_rl.engine.progress import NullProgress, Progress
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.base import Domain, Environment
from trace_rl.envs.users import LLMUserSimulator, UserSimulator
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.pool import episode_scope
from trace_rl.types import ErrorRecord, TerminationReason, Trajectory

TokenIds = Literal["all", "completion", "none"]
EpisodeFn = Callable[[Job], Awaitable[Trajectory]]


@dataclass
class EpisodeFactory:
    """What every episode of one rollout shares; each episode builds its own environment, user and agent."""

    domain: Domain
    env_name: str
    split: str
    client: ModelClient
    model_name: str
    adapter: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    user_client: ModelClient | None = None
    user_sampling: SamplingParams | None = None
    user_model: str | None = None
    judge: ModelClient | None = None
    token_ids: TokenIds = "all"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.system_prompt = self.domain.system_prompt()
        self._tools: list[dict[str, Any]] | None = None
        self.metadata = {
            "system_prompt_sha1": hashlib.sha1(self.system_prompt.encode()).hexdigest()[:12],
            "sampling": self.sampling.model_dump(exclude_none=True),
            **self.metadata,
        }

    def make_user(self, job: Job, env: Environment) -> UserSimulator:
        if self.user_client is None:
            user = self.domain.scripted_user(job.task)
            if user is None:
                raise UserError(f"environment '{self.env_name}' has no scripted user for task {job.task.id}")
            return user
        own = getattr(self.domain, "llm_user", None)  # a domain with its own LLM user (toolsandbox)
        if own is not None:
            user = own(self.user_client, job.task, self.user_sampling)
            if self.user_model:
                user.name = f"llm:{self.user_model}"
            return user
        guidelines = getattr(self.domain, "guidelines", None)
        if guidelines is None:
            raise UserError(f"environment '{self.env_name}' has no user guidelines for an LLM user simulator")
        user = LLMUserSimulator(
            self.user_client, job.task, guidelines(), tools=env.user_tool_schemas(), sampling=self.user_sampling
        )
        if self.user_model:
            user.name = f"llm:{self.user_model}"  # the served model, not the config's name for it
        return user

    def spec(self, job: Job) -> EpisodeSpec:
        return EpisodeSpec(
            env=self.env_name,
            split=self.split,
            trial=job.trial,
            seed=job.seed,
            model=self.model_name,
            adapter=self.adapter,
            metadata=dict(self.metadata),
            trajectory_id=job.id,
        )

    async def run(self, job: Job) -> Trajectory:
        """One episode; never raises except `UserError` (an unexpected error becomes an `internal:` record)."""
        spec = self.spec(job)
        started = time.time()
        try:
            env = await asyncio.to_thread(self.domain.make_env)  # a deep copy of the DB: off the event loop
            user = self.make_user(job, env)
            per_task = getattr(self.domain, "tool_schemas_for", None)  # a domain whose schemas differ per task
            if per_task is not None:
                tools = per_task(job.task)
            else:  # the same for every episode of a domain; generating them costs ~4 ms
                if self._tools is None:
                    self._tools = env.tool_schemas()
                tools = self._tools
            with episode_scope():  # an endpoint pool keeps one server for the whole episode
                agent = domain_agent(
                    self.domain,
                    self.client,
                    system_prompt=self.system_prompt,
                    tools=tools,
                    sampling=self.sampling,
                    adapter=self.adapter,
                )
                traj = await run_episode(
                    env=env, task=job.task, agent=agent, user=user, spec=spec, limits=self.limits, judge=self.judge
                )
        except UserError:
            raise
        except Exception as exc:  # one broken episode is data, not a crashed rollout
            traj = internal_failure(job, spec, exc, started)
        return strip_token_ids(traj, self.token_ids)


def internal_failure(job: Job, spec: EpisodeSpec, exc: BaseException, started: float) -> Trajectory:
    """A record for an episode that crashed inside trace-rl: retried on rerun, never an agent failure."""
    message = f"internal: {type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4))
    traj = Trajectory(
        id=job.id,
        env=spec.env,
        split=spec.split,
        task_id=job.task.id,
        trial=job.trial,
        seed=job.seed,
        model=spec.model,
        adapter=spec.adapter,
        termination=TerminationReason.INFRA_ERROR,
        infra_error=message,
        errors=[ErrorRecord(kind="internal", message=f"{message}\n{trace}")],
        metadata=spec.metadata,
    )
    traj.timings.started_at, traj.timings.ended_at = started, time.time()
    return traj


def strip_token_ids(traj: Trajectory, keep: TokenIds) -> Trajectory:
    """`all` keeps what the backend returned; `completion` drops per-turn prompt ids (quadratic in turns); `none`."""
    if keep == "all":
        return traj
    for message in traj.messages:
        if message.sampled is None:
            continue
        if keep == "none":
            message.sampled = None
        else:
            message.sampled.prompt_ids = None
    return traj


class TrajectoryWriter:
    """Appends finished trajectories in batches from one worker thread, so fsync never blocks the event loop."""

    def __init__(self, store: JsonlStore) -> None:
        self.store = store
        self.written = 0
        self._pending: list[Trajectory] = []
        self._inflight: list[Trajectory] = []
        self._future: concurrent.futures.Future[None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-writer")
        self._wake = asyncio.Event()

    def put(self, traj: Trajectory) -> None:
        self._pending.append(traj)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                self._inflight, self._pending = self._pending, []
                self._future = self._executor.submit(self.store.append, self._inflight)
                await asyncio.wrap_future(self._future)
                self.written += len(self._inflight)
                self._inflight = []

    def flush(self) -> None:
        """Write whatever is left (after `run` stopped), waiting for an append already under way."""
        if self._inflight and self._future is not None:
            if self._future.cancelled():
                self._pending[:0] = self._inflight
            else:
                self._future.result()
                self.written += len(self._inflight)
            self._inflight = []
        if self._pending:
            batch, self._pending = self._pending, []
            self.store.append(batch)
            self.written += len(batch)
        self._executor.shutdown(wait=True)


class EpisodeExecutor(Protocol):
    """Where a rollout's episodes run (`trace_rl.executor`'s executors are ones): an async context that yields
    `(run_episode, slots)`; the rollout awaits `run_episode(job)` with at most `slots` in flight."""

    def episodes(
        self, factory: EpisodeFactory, concurrency: int
    ) -> AbstractAsyncContextManager[tuple[EpisodeFn, int]]: ...


@asynccontextmanager
async def in_process(factory: EpisodeFactory, concurrency: int) -> AsyncIterator[tuple[EpisodeFn, int]]:
    """The default: every episode on this event loop."""
    yield factory.run, concurrency


@dataclass
class RolloutResult:
    """What one rollout command did."""

    label: str
    planned: int
    resumed: int = 0
    ran: int = 0
    scored: int = 0
    successes: int = 0
    infra: int = 0
    not_started: int = 0
    stopped: str | None = None
    elapsed_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0

    @property
    def complete(self) -> bool:
        """Every planned episode is done (none left to retry or start)."""
        return self.infra == 0 and self.not_started == 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["complete"] = self.complete
        out["episodes_per_s"] = round(self.ran / self.elapsed_s, 3) if self.elapsed_s > 0 else None
        out["completion_tokens_per_s"] = (
            round(self.completion_tokens / self.elapsed_s, 1) if self.elapsed_s > 0 else None
        )
        return out


async def run_rollout(
    jobs: list[Job],
    factory: EpisodeFactory,
    store: JsonlStore,
    *,
    concurrency: int = 4,
    progress: Progress | None = None,
    stop_after_infra: int | None = None,
    label: str | None = None,
    executor: EpisodeExecutor | None = None,
) -> RolloutResult:
    """Run the jobs not yet done with `concurrency` episodes in flight; append each trajectory as it finishes.

    `executor` decides where an episode runs (default: on this event loop); under Ray, `concurrency` is the total
    spread over the workers. Writing, resume and accounting stay here, in the driver, whichever runs the episodes."""
    progress = progress or NullProgress()
    label = label or f"{factory.env_name}/{factory.split}"
    pending = pending_jobs(jobs, store.latest())
    result = RolloutResult(label=label, planned=len(jobs), resumed=len(jobs) - len(pending))
    queue = deque(pending)
    writer = TrajectoryWriter(store)
    streak = 0
    started = time.perf_counter()

    run_episode = factory.run

    async def worker() -> None:
        nonlocal streak
        while queue and result.stopped is None:
            job = queue.popleft()
            progress.episode_started()
            traj = await run_episode(job)
            writer.put(traj)
            progress.episode_finished(traj)
            result.ran += 1
            result.prompt_tokens += traj.tokens.prompt
            result.completion_tokens += traj.tokens.completion
            result.model_calls += traj.tokens.model_calls
            if traj.is_infra_failure:
                result.infra += 1
                streak += 1
                if stop_after_infra and streak >= stop_after_infra and result.stopped is None:
                    result.stopped = f"{streak} infrastructure failures in a row (last: {traj.infra_error})"
                    progress.note(f"stopping: {result.stopped}; rerun the same command to retry")
            else:
                streak = 0
                result.scored += 1
                result.successes += bool(traj.success)

    progress.start(label, len(pending), result.resumed)
    writer_task = asyncio.create_task(writer.run())
    try:
        if pending:  # nothing to run starts no workers (a resumed, finished rollout)
            async with (
                (executor.episodes if executor else in_process)(factory, concurrency) as (run_episode, slots),
                asyncio.TaskGroup() as group,
            ):
                for _ in range(min(slots, len(pending))):
                    group.create_task(worker())
    except BaseExceptionGroup as errors:
        first = errors.exceptions[0]
        raise first from (None if isinstance(first, UserError) else errors)
    finally:
        writer_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer_task
        writer.flush()
        result.not_started = len(queue)
        result.elapsed_s = time.perf_counter() - started
        progress.close()
    return result
