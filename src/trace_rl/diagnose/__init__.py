"""Diagnose (TRACE stage 1b): find the capabilities the agent lacks by contrasting successful and failed rollouts.

discovery (a capability dictionary, once) → N independent labeling runs (NA / PRESENT / LACKING per trajectory and
capability) → ER±, Δ, Cov per run and the K-of-N rule (`aggregate.py`) → `diagnose/capabilities.json`.
Analysts: the reference-guided `structural` analyzer (no LLM, default) or any chat model (`llm.py`).
"""

from trace_rl.diagnose.aggregate import CapabilityStats, RunStats, aggregate, run_stats
from trace_rl.diagnose.config import DiagnoseConfig, diagnose_config
from trace_rl.diagnose.items import Analyst, AnalystError, DiagnosisItem
from trace_rl.diagnose.llm import LLMAnalyst
from trace_rl.diagnose.report import capabilities_dict, capabilities_table, render
from trace_rl.diagnose.schema import CapabilitiesFile, Label
from trace_rl.diagnose.stage import DiagnoseResult, diagnose_async, read_capabilities, run_diagnose
from trace_rl.diagnose.structural import StructuralAnalyst, analyze

__all__ = [
    "Analyst",
    "AnalystError",
    "CapabilitiesFile",
    "CapabilityStats",
    "DiagnoseConfig",
    "DiagnoseResult",
    "DiagnosisItem",
    "LLMAnalyst",
    "Label",
    "RunStats",
    "StructuralAnalyst",
    "aggregate",
    "analyze",
    "capabilities_dict",
    "capabilities_table",
    "diagnose_async",
    "diagnose_config",
    "read_capabilities",
    "render",
    "run_diagnose",
    "run_stats",
]
