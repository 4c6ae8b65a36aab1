"""The probe analyzer: labels each capability by sampling the agent at the decision point where it is needed.

TRACE (Kang et al. 2026, §3.2) labels a trajectory from what it shows. A trajectory that fails at its first broken link
shows nothing of the links after it: a base agent that never identifies the member never reaches the confirmation,
so an analyzer that reads trajectories labels the confirmation NA or PRESENT, and the aggregation never selects it
(measured on the library, issue #18: `precondition_verification` at Δ 0 while the base asks for the member's yes in 0
of 320 probes). The probe opens each diagnosed task at every decision point of `envs/synthetic/library_decisions.py`
that its family needs (the gold moves before it replayed with their results, the target's tools, DB, prompt and
scripted member), samples the agent's move there `probe.samples` times, and labels the decision LACKING when fewer
than `probe.threshold` of the moves are right, PRESENT otherwise, NA when the task has no such decision point. The
labels then go through TRACE's aggregation unchanged: coverage counts the failed trajectories, Δ contrasts them with
the successful ones, K of N runs (each run samples afresh, under its own seeds).

Departures: the capabilities are the decisions of the library's policy (a fixed dictionary, as the structural
analyzer's) and are not discovered; a label comes from new samples of the agent on the diagnosed task, not from the
diagnosed trajectory, so a diagnosis costs `samples` short episodes per (task, decision point); only library tasks
have decision points: the others are NA throughout, with a warning, and a batch with none of them is refused.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trace_rl.artifacts.capabilities import CandidateSpec, Label, LabelMatrix
from trace_rl.config.diagnose import PROBE, ProbeConfig
from trace_rl.diagnose.items import DiagnosisItem, DiscoveryResult, LabelResult
from trace_rl.engine.episode import EpisodeLimits
from trace_rl.engine.progress import NullProgress, Progress
from trace_rl.engine.text_driver import EpisodeSpec, domain_agent, run_episode
from trace_rl.envs.synthetic.environment import DECISION_TURNS
from trace_rl.envs.synthetic.library_decisions import DECISIONS, judge, open_at
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.types import Task

RIGHT = 1.0  # a move is right when its decision's judge gives it the full score


@dataclass
class ProbeReport:
    """What the probes of one trajectory's task found (capabilities.json's `trajectories[].reasons`)."""

    rates: dict[str, float]  # decision -> share of right moves (the last labeling run)
    user_fault: str | None = None

    def notes(self) -> list[str]:
        return [f"{name}: {100 * rate:.0f}% of the probed moves right" for name, rate in sorted(self.rates.items())]


@dataclass
class ProbeAnalyst:
    """The Analyst protocol (`items.py`) over probes of `client` (the agent) in the diagnosed tasks' `domains`."""

    client: ModelClient
    domains: Mapping[str, Any]  # environment name -> its target Domain (only library tasks have decision points)
    cfg: ProbeConfig
    progress: Progress = field(default_factory=NullProgress)  # probe episodes done of each labeling run
    name: str = PROBE
    rates: dict[str, dict[str, float]] = field(default_factory=dict)  # item -> decision -> right share, last run
    _openings: dict[str, dict[str, Task]] = field(default_factory=dict)

    def openings(self, item: DiagnosisItem) -> dict[str, Task]:
        """The item's task opened at each decision point it has (decision name -> the opened task)."""
        if item.id not in self._openings:
            domain = self.domains.get(item.trajectory.env)
            task = item.task
            found: dict[str, Task] = {}
            if domain is not None and task is not None and "user_script" in task.metadata:
                family = task.metadata.get("family")
                for decision in DECISIONS.values():
                    if family not in decision.families:  # a task of another family does not need the capability
                        continue
                    opened = open_at(decision, task, domain)
                    if opened is not None:
                        found[decision.name] = opened
            self._openings[item.id] = found
        return self._openings[item.id]

    def report(self, item: DiagnosisItem) -> ProbeReport:
        return ProbeReport(dict(self.rates.get(item.id, {})))

    def _probed(self, items: Sequence[DiagnosisItem]) -> tuple[list[DiagnosisItem], list[str]]:
        probed = [i for i in items if self.openings(i)]
        if not probed:
            raise UserError(
                "diagnose: the probe analyzer found no decision point in the diagnosed tasks (decision points are "
                "defined for library tasks with gold actions; use --analyst structural or an LLM for other targets)"
            )
        left = len(items) - len(probed)
        warnings = [f"probe: {left} of {len(items)} trajectories have no decision point: labeled NA"] if left else []
        return probed, warnings

    async def discover(self, items: Sequence[DiagnosisItem], *, seed: int = 0) -> DiscoveryResult:
        """Every decision at least one diagnosed task has, with up to four failed tasks that have it."""
        probed, warnings = self._probed(items)
        candidates = []
        for decision in DECISIONS.values():
            having = [i for i in probed if decision.name in self.openings(i)]
            if having:
                failed = [i.task_id for i in having if not i.success]
                candidates.append(
                    CandidateSpec(
                        name=decision.name,
                        definition=decision.definition,
                        example_task_ids=list(dict.fromkeys(failed))[:4],
                    )
                )
        return DiscoveryResult(candidates=candidates, warnings=warnings)

    async def label(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, run: int = 0, seed: int = 0
    ) -> LabelResult:
        probed, warnings = self._probed(items)
        names = [c.name for c in capabilities]
        unknown = sorted(set(names) - set(DECISIONS))
        if unknown:
            warnings.append(f"probe analyzer cannot label {', '.join(unknown)}: labeled NA")
        gate = asyncio.Semaphore(self.cfg.concurrency)
        sampling = self._sampling()
        jobs = [
            (item, name, k)
            for item in probed
            for name in names
            if name in self.openings(item)
            for k in range(self.cfg.samples)
        ]
        self.progress.start(f"probe run {run}", len(jobs), 0)
        try:
            scores = await asyncio.gather(
                *(self._move(gate, sampling, item, name, k, run + seed) for item, name, k in jobs)
            )
        finally:
            self.progress.close()
        right: dict[tuple[str, str], list[bool]] = {}
        failed: set[str] = set()
        for (item, name, _), score in zip(jobs, scores, strict=True):
            if score is None:  # the model server failed this probe: the item is unlabeled in this run
                failed.add(item.id)
            else:
                right.setdefault((item.id, name), []).append(score >= RIGHT)
        labels: LabelMatrix = {}
        for item in items:
            row = {}
            for name in names:
                moves = right.get((item.id, name))
                if not moves:
                    row[name] = Label.NA
                    continue
                share = sum(moves) / len(moves)
                self.rates.setdefault(item.id, {})[name] = share
                row[name] = Label.LACKING if share < self.cfg.threshold else Label.PRESENT
            labels[item.id] = row
        return LabelResult(labels=labels, warnings=warnings, calls=len(jobs), failed=sorted(failed))

    def _sampling(self) -> SamplingParams:
        """The policy's sampling settings, with the probe's temperature and token budget where it sets them."""
        base = getattr(self.client, "cfg", None)
        return SamplingParams(
            temperature=self.cfg.temperature if self.cfg.temperature is not None else getattr(base, "temperature", 1.0),
            top_p=getattr(base, "top_p", 1.0),
            top_k=getattr(base, "top_k", 0),
            max_tokens=self.cfg.max_tokens or getattr(base, "max_tokens", 512),
        )

    async def _move(
        self, gate: asyncio.Semaphore, sampling: SamplingParams, item: DiagnosisItem, decision: str, k: int, run: int
    ) -> float | None:
        """One probe: the agent's score at `decision` of the item's task (None: the episode failed on the server)."""
        domain = self.domains[item.trajectory.env]
        task = self.openings(item)[decision]
        seed = zlib.crc32(f"{item.id}/{decision}/{run}".encode()) % 1_000_000 * 100 + k
        async with gate:
            self.progress.episode_started()
            env = domain.make_env()
            agent = domain_agent(
                domain, self.client, tools=env.tool_schemas(), sampling=sampling, adapter=self.cfg.adapter
            )
            spec = EpisodeSpec(
                env=item.trajectory.env,
                split="probe",
                trial=k,
                seed=seed,
                model=self.client.name,
                adapter=self.cfg.adapter,
                capability=decision,
                trajectory_id=f"probe/{item.id}/{decision}/{run}/{k}",
            )
            limits = EpisodeLimits(
                max_steps=self.cfg.max_steps, max_errors=self.cfg.max_errors, max_turns=DECISION_TURNS
            )
            traj = await run_episode(
                env=env, task=task, agent=agent, user=domain.scripted_user(task), spec=spec, limits=limits
            )
        score = None if traj.is_infra_failure else judge(task, traj.messages)
        self.progress.episode_finished(traj.model_copy(update={"success": score is not None and score >= RIGHT}))
        return score


__all__ = ["ProbeAnalyst", "ProbeReport"]
