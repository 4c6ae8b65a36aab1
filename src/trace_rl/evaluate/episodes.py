"""What every arm shares: the target's held-out tasks, the policy and user clients, decoding, limits and seeds — and
one way to run a variant of the agent (an adapter, a router, extra system-prompt text) over tasks, resumably.

Routing (the TRACE arm): `RoutedClient` wraps the policy client; the first time a conversation's first user message
is seen it asks the router (once per distinct message, so once per task however many trials), then every turn of
that episode goes to the chosen adapter (None for the base label). `RoutedEpisodeFactory` stamps the decision on each
trajectory (`adapter`, `metadata.route`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import EvaluateLayout
from trace_rl.artifacts.router import BASE
from trace_rl.artifacts.store import JsonlStore, RunDir
from trace_rl.config import ModelConfig, TraceConfig
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.plan import Job, plan_jobs
from trace_rl.engine.runner import EpisodeFactory, RolloutResult, run_rollout
from trace_rl.errors import UserError
from trace_rl.evaluate.budget import AdapterBudget, run_adapter_budget
from trace_rl.executor.base import Executor
from trace_rl.messages import first_user_text, system_text
from trace_rl.models.base import ModelClient, ModelResponse, SamplingParams
from trace_rl.routing.router import RouteDecision, Router, decide
from trace_rl.types import Message, Task, Trajectory

STAGE = "evaluate"


class ArmSkipped(Exception):
    """An arm that cannot run; the reason is reported in the comparison."""


class RoutedClient:
    """The policy client with one routing decision per conversation (keyed by its first user message)."""

    def __init__(
        self,
        client: ModelClient,
        router: Router,
        *,
        allowed: set[str] | None = None,
        fallback_note: str = "'{name}' is not an option here; base used",
        served: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.served = served or {}  # capability -> the adapter name that serves it (default: its own name)
        self.router = router
        self.name = client.name
        self.allowed = allowed
        self.fallback_note = fallback_note
        self.decisions: dict[str, RouteDecision] = {}
        self.route_calls = 0
        self._lock: asyncio.Lock | None = None

    async def decision(self, first: str, system: str | None) -> RouteDecision:
        if first in self.decisions:
            return self.decisions[first]
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if first not in self.decisions:
                made = await asyncio.to_thread(decide, self.router, first, system)
                self.route_calls += 1
                if self.allowed is not None and made.name not in self.allowed:
                    made = RouteDecision(
                        name=BASE,
                        label=made.label,
                        scores=made.scores,
                        note=self.fallback_note.format(name=made.name),
                    )
                self.decisions[first] = made
        return self.decisions[first]

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        first = first_user_text(messages)
        if first is not None:
            system = system_text(messages)
            made = await self.decision(first, system)
            adapter = self.adapter_of(made.name)
        return await self.client.chat(messages, tools, adapter=adapter, sampling=sampling)

    def adapter_of(self, name: str) -> str | None:
        """The adapter serving the routed capability `name` (None: the base model)."""
        return None if name == BASE else self.served.get(name, name)

    async def aclose(self) -> None:
        """The wrapped client is closed by its owner."""


@dataclass
class RoutedEpisodeFactory(EpisodeFactory):
    """An `EpisodeFactory` whose trajectories record the route taken."""

    routed: RoutedClient | None = None

    async def run(self, job: Job) -> Trajectory:
        traj = await super().run(job)
        if self.routed is not None:
            first = first_user_text(traj.messages)
            made = self.routed.decisions.get(first) if first is not None else None
            if made is not None:
                traj.adapter = self.routed.adapter_of(made.name)
                traj.metadata["route"] = {
                    "name": made.name,
                    "label": made.label,
                    "note": made.note,
                    "scores": {k: v for k, v in made.scores.items() if v == v and abs(v) < 1e30},
                }
        return traj


@dataclass
class EvalContext:
    """Everything the arms share (built once by `stage.run_evaluate`)."""

    run: RunDir
    cfg: TraceConfig
    ecfg: EvaluateConfig
    domain: Any
    env_name: str
    tasks: list[Task]
    client: ModelClient
    policy_name: str
    policy_cfg: ModelConfig | None
    model_label: str
    sampling: SamplingParams
    limits: EpisodeLimits
    user_client: ModelClient | None = None
    user_label: str = "scripted"
    clients: dict[str, ModelClient] = field(default_factory=dict)
    router_factory: Callable[[Any], Router] | None = None
    backend: Any = None
    reflection_lm: Callable[[Any], str] | None = None
    total_budget: int | None = None
    budget_source: str = ""
    echo: Callable[[str], None] = lambda _: None
    executor: Executor | None = None
    budgets: dict[str, AdapterBudget] = field(default_factory=dict)  # adapter name -> budget, filled on first use

    @property
    def split(self) -> str:
        return self.ecfg.split

    @property
    def out(self) -> EvaluateLayout:
        """The folder this evaluation writes: `evaluate/`, or `evaluate@<out>/`."""
        return self.run.evaluation(self.ecfg.out)

    def folder(self, shared: bool = False) -> EvaluateLayout:
        """`out`, or with `shared` the run's `evaluate/`: what does not depend on the evaluated split (baselines, the
        guard's train-split episodes) is played once per run and read by every evaluation of it."""
        return self.run.evaluate if shared else self.out

    def adapter_budget(self, name: str) -> AdapterBudget:
        """The budget of the run's adapter `name` (`run_adapter_budget`), computed once per evaluate run: it scans the
        adapter's training trajectories, which do not change while evaluate runs."""
        if name not in self.budgets:
            self.budgets[name] = run_adapter_budget(self.run, name)
        return self.budgets[name]

    def store(self, relpath: str, *, shared: bool = False) -> JsonlStore:
        return JsonlStore(self.path(relpath, shared=shared))

    def path(self, relpath: str, *, shared: bool = False) -> Path:
        """A file of the evaluate stage, named relative to its folder (`folder(shared)`)."""
        return self.folder(shared).path(relpath)

    def train_tasks(self) -> list[Task]:
        if "train" not in self.domain.splits():
            raise ArmSkipped(f"environment '{self.env_name}' has no train split")
        return self.domain.tasks("train")

    def identity(self, **extra: Any) -> dict[str, Any]:
        """Who plays: identical for every arm except the extras (adapters, router, prompt)."""
        return {
            "policy": self.model_label,
            "user": self.user_label,
            "seed": self.ecfg.seed,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": self.sampling.max_tokens,
            "max_steps": self.limits.max_steps,
            "max_errors": self.limits.max_errors,
            "env": self.env_name,
            "split": self.split,
            **extra,
        }

    def ensure_adapter(self, name: str, path: Path) -> None:
        """Make `name` servable: loaded into an in-process model, or served by the model's server."""
        load = getattr(self.client, "load_adapter", None)
        if load is not None:
            loaded = getattr(self.client, "adapters", {})
            if loaded.get(name) != Path(path):
                load(name, path)
            return
        if self.policy_cfg is not None and self.policy_cfg.kind == "openai":
            from trace_rl.models.served import served_models

            listed = served_models(self.policy_cfg)
            if listed is not None and name not in listed:
                raise ArmSkipped(f"the server does not serve adapter '{name}' (load {path} under that name)")
        # scripted / test clients take any adapter name

    def factory(
        self,
        split: str,
        *,
        adapter: str | None = None,
        router: RoutedClient | None = None,
        system_suffix: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> EpisodeFactory:
        factory = RoutedEpisodeFactory(
            domain=self.domain,
            env_name=self.env_name,
            split=split,
            client=router if router is not None else self.client,
            model_name=self.model_label,
            adapter=adapter,
            sampling=self.sampling,
            limits=self.limits,
            user_client=self.user_client,
            user_sampling=SamplingParams(temperature=0.0, max_tokens=512),
            token_ids="none",
            metadata={"run": self.run.name, "user": self.user_label, **(metadata or {})},
            routed=router,
        )
        if system_suffix:
            factory.system_prompt = factory.system_prompt + system_suffix
            factory.metadata["system_prompt_sha1"] = hashlib.sha1(factory.system_prompt.encode()).hexdigest()[:12]
        return factory

    def run_jobs(self, jobs: list[Job], factory: EpisodeFactory, store: JsonlStore, label: str) -> RolloutResult:
        """Run the jobs not yet in `store` (a rerun resumes); infra failures are retried on the next run."""

        async def main() -> RolloutResult:
            return await run_rollout(
                jobs, factory, store, concurrency=self.ecfg.concurrency, label=label, executor=self.executor
            )

        try:
            result = asyncio.run(main())
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None
        self.echo(f"{label}: {result.ran} episodes run, {result.resumed} already done, {result.infra} infra failures")
        return result

    def evaluate(
        self,
        label: str,
        relpath: str,
        *,
        tasks: list[Task] | None = None,
        split: str | None = None,
        trials: int | None = None,
        adapter: str | None = None,
        router: RoutedClient | None = None,
        system_suffix: str = "",
        metadata: dict[str, Any] | None = None,
        shared: bool = False,
    ) -> RolloutResult:
        """Every (task, trial) of `tasks` (default: the held-out tasks) for one agent variant, into `relpath` (of the
        run's shared `evaluate/` with `shared`)."""
        split = split or self.split
        tasks = self.tasks if tasks is None else tasks
        trials = trials or self.ecfg.trials
        jobs = plan_jobs(self.env_name, split, tasks, trials, self.ecfg.seed)
        factory = self.factory(split, adapter=adapter, router=router, system_suffix=system_suffix, metadata=metadata)
        return self.run_jobs(jobs, factory, self.store(relpath, shared=shared), label)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                asyncio.run(c.aclose())


def check_tasks(domain: Any, env_name: str, split: str, limit: int | None) -> list[Task]:
    if split not in domain.splits():
        raise UserError(f"environment '{env_name}' has no split '{split}' (splits: {', '.join(domain.splits())})")
    tasks = domain.tasks(split)
    tasks = tasks[:limit] if limit else tasks
    if not tasks:
        raise UserError(f"{env_name}/{split}: no tasks to evaluate")
    return tasks


__all__ = [
    "STAGE",
    "ArmSkipped",
    "EvalContext",
    "RoutedClient",
    "RoutedEpisodeFactory",
    "check_tasks",
]
