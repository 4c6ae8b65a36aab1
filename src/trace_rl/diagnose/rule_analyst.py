"""`RuleAnalyst`: the Analyst protocol (`items.py`) for analyzers that label by fixed rules, without an LLM.

The structural (reference-guided) and the behavioral (gold-free) analyzers share it: discovery returns their fixed
dictionary with up to four failed example tasks per capability, and every labeling run reads the same per-trajectory
reports (so the runs agree). A subclass says what its capabilities are, how one item is reported, and which warnings
a batch raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from trace_rl.artifacts.capabilities import CandidateSpec, Label, LabelMatrix
from trace_rl.diagnose.items import DiagnosisItem, DiscoveryResult, LabelResult


class RuleAnalyst:
    """A fixed dictionary and deterministic labels from `report(item).labels()`."""

    name: ClassVar[str]
    capabilities: ClassVar[tuple[str, ...]]
    definitions: ClassVar[Mapping[str, str]]

    def report(self, item: DiagnosisItem) -> Any:
        """The item's report: `.labels()` (capability -> Label), `.notes()` and `.user_fault`."""
        raise NotImplementedError

    def prepare(self, items: Sequence[DiagnosisItem]) -> None:
        """Called with the whole batch before discovery and labeling (a batch-contrasting analyzer reads it here)."""

    def batch_warnings(self, items: Sequence[DiagnosisItem]) -> list[str]:
        return []

    @classmethod
    def dictionary(cls) -> list[CandidateSpec]:
        """The fixed capability dictionary: every capability with its definition."""
        return [CandidateSpec(name=n, definition=cls.definitions[n]) for n in cls.capabilities]

    async def discover(self, items: Sequence[DiagnosisItem], *, seed: int = 0) -> DiscoveryResult:
        self.prepare(items)
        specs = self.dictionary()
        for spec in specs:
            failed = [i.task_id for i in items if not i.success and self.report(i).labels()[spec.name] == Label.LACKING]
            spec.example_task_ids = list(dict.fromkeys(failed))[:4]
        return DiscoveryResult(candidates=specs, warnings=self.batch_warnings(items))

    async def label(
        self, items: Sequence[DiagnosisItem], capabilities: Sequence[CandidateSpec], *, run: int = 0, seed: int = 0
    ) -> LabelResult:
        self.prepare(items)
        names = [c.name for c in capabilities]
        labels: LabelMatrix = {}
        for item in items:
            row = self.report(item).labels()
            labels[item.id] = {n: row.get(n, Label.NA) for n in names}
        warnings = self.batch_warnings(items)
        unknown = sorted(set(names) - set(self.capabilities))
        if unknown:
            warnings.append(f"{self.name} analyzer cannot label {', '.join(unknown)}: labeled NA")
        return LabelResult(labels=labels, warnings=warnings)


__all__ = ["RuleAnalyst"]
