"""The analyst of a diagnose run: the structural, the behavioral or an LLM analyst, as `DiagnoseConfig.analyst` names.

The structural analyzer (`structural.py`, no LLM) needs the tasks' gold actions: with none among the diagnosed
trajectories (imported OpenEnv / verifiers targets), the behavioral analyzer (`behavioral.py`, no LLM, no reference)
runs in its place, with a warning. `analyst: behavioral` names it directly. An LLM analyst (`llm.py`) takes the client
of its name from the clients given (or the one client given); with `structural_evidence` and gold actions, each item
carries the structural analyzer's notes and the discovery prompt a table of each structural capability's deficits in
failed and in successful trajectories. The probe analyzer (`probe.py`, `analyst: probe`) takes the agent's client and
the diagnosed environments' domains, and samples the agent at the tasks' decision points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trace_rl.artifacts.capabilities import Label
from trace_rl.config.diagnose import BEHAVIORAL, PROBE, DiagnoseConfig
from trace_rl.diagnose.behavioral import BehavioralAnalyst
from trace_rl.diagnose.calls import WriteOracle
from trace_rl.diagnose.items import Analyst, DiagnosisItem
from trace_rl.diagnose.llm import LLMAnalyst
from trace_rl.diagnose.probe import ProbeAnalyst
from trace_rl.diagnose.structural import CAPABILITIES as STRUCTURAL_CAPABILITIES
from trace_rl.diagnose.structural import StructuralAnalyst
from trace_rl.engine.progress import NullProgress, Progress
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient


def _evidence_table(items: Sequence[DiagnosisItem], structural: StructuralAnalyst) -> str:
    rows = []
    for cap in STRUCTURAL_CAPABILITIES:
        counts = {True: [0, 0], False: [0, 0]}  # success -> [lacking, applicable]
        for item in items:
            label = structural.report(item).labels()[cap]
            if label != Label.NA:
                counts[item.success][1] += 1
                counts[item.success][0] += label == Label.LACKING
        f, s = counts[False], counts[True]
        if f[1] or s[1]:
            rows.append(f"- {cap}: deficit in {f[0]} of {f[1]} failed and {s[0]} of {s[1]} successful trajectories")
    return "\n".join(rows)


def _resolve_client(
    cfg: DiagnoseConfig, clients: Mapping[str, ModelClient] | ModelClient | None, name: str | None = None
) -> ModelClient:
    name = name or cfg.analyst
    client = clients.get(name) if isinstance(clients, Mapping) else clients
    if client is None:
        raise UserError(f"diagnose: analyst '{cfg.analyst}' needs a model client for '{name}' (none was given)")
    return client


def make_analyst(
    cfg: DiagnoseConfig,
    clients: Mapping[str, ModelClient] | ModelClient | None,
    items: list[DiagnosisItem],
    is_write: WriteOracle,
    n_reference: int,
    warnings: list[str],
    domains: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> Analyst:
    """The analyst `cfg.analyst` names; `domains` (environment name -> Domain) are the probe analyzer's targets and
    `progress` shows its episodes."""
    if cfg.analyst == BEHAVIORAL:
        return BehavioralAnalyst()
    if cfg.analyst == PROBE:
        client = _resolve_client(cfg, clients, cfg.probe.policy or "policy")
        return ProbeAnalyst(client, dict(domains or {}), cfg.probe, progress=progress or NullProgress())
    structural = StructuralAnalyst(is_write)
    if cfg.is_structural:
        if n_reference == 0:
            warnings.append(
                "no diagnosed task has gold actions: the behavioral analyzer labels from observable behavior instead "
                "of the structural one"
            )
            return BehavioralAnalyst()
        return structural
    evidence = ""
    if cfg.structural_evidence and n_reference:
        for item in items:
            item.notes = structural.report(item).notes()
        evidence = _evidence_table(items, structural)
    return LLMAnalyst(_resolve_client(cfg, clients), cfg, name=cfg.analyst, evidence=evidence)


__all__ = ["make_analyst"]
