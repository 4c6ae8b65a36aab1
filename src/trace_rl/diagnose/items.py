"""What an analyst reads (`DiagnosisItem`: a trajectory, its task when known, evidence notes) and the `Analyst` seam.

An analyst does two things (TRACE §3.2): `discover` a canonical capability dictionary once, then `label` every
(trajectory, capability) pair NA / PRESENT / LACKING, once per independent labeling run. The LLM analyst (`llm.py`)
and the reference-guided structural analyzer (`structural.py`) both implement it, so the same aggregation applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from trace_rl.artifacts.capabilities import CandidateSpec, LabelMatrix
from trace_rl.errors import UserError
from trace_rl.types import Task, Trajectory


class AnalystError(UserError):
    """The analyst's output stayed invalid after the allowed repairs, or its model failed; nothing was written."""


@dataclass
class DiagnosisItem:
    """One diagnosed trajectory. `notes` are evidence lines shown to an LLM analyst (structural findings)."""

    trajectory: Trajectory
    task: Task | None = None
    notes: list[str] = field(default_factory=list)
    policy: str = ""  # the agent's policy (the environment's), shown to an LLM analyst
    offers_tools: bool = False  # the environment gave the agent tools (known when the stage loaded it)

    @property
    def id(self) -> str:
        return self.trajectory.id

    @property
    def task_id(self) -> str:
        return self.trajectory.task_id

    @property
    def success(self) -> bool:
        return bool(self.trajectory.success)


@dataclass
class DiscoveryResult:
    candidates: list[CandidateSpec]
    warnings: list[str] = field(default_factory=list)
    prompt_chars: int = 0


@dataclass
class LabelResult:
    labels: LabelMatrix
    warnings: list[str] = field(default_factory=list)
    calls: int = 0
    failed: list[str] = field(default_factory=list)  # trajectories the analyst could not label in this run


@runtime_checkable
class Analyst(Protocol):
    """Discovers a capability dictionary and labels trajectories against it."""

    name: str

    async def discover(self, items: Sequence[DiagnosisItem], *, seed: int) -> DiscoveryResult: ...

    async def label(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, run: int, seed: int
    ) -> LabelResult: ...


__all__ = ["Analyst", "AnalystError", "DiagnosisItem", "DiscoveryResult", "LabelResult"]
