"""Records of the diagnose stage: labels, what an analyst returns, and the files written under `diagnose/`.

Analyst output is validated against `DiscoveryOutput` / `LabelBatchOutput` before anything uses it; the files
(`discovery.json`, `labels/run_<i>.json`, `capabilities.json`) are validated against `DiscoveryRecord`,
`LabelRunRecord` and `CapabilitiesFile` before they are written, so a file on disk is always complete and well formed.
`read_capabilities` is the one reader of `capabilities.json` (synthesize, route, evaluate and the report use it).
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trace_rl.artifacts.layout import RunLayout
from trace_rl.artifacts.store import atomic_write_json, read_model
from trace_rl.errors import UserError
from trace_rl.types import MAX_CAPABILITY_NAME, Capability


class Label(StrEnum):
    """TRACE §3.3: is capability c necessary for the task (else NA), and was it exercised (PRESENT) or not (LACKING)?"""

    NA = "NA"
    PRESENT = "PRESENT"
    LACKING = "LACKING"

    @classmethod
    def parse(cls, value: Any) -> Label:
        """Lenient spelling: 'lacking', 'N/A', 'not applicable', 'present ' all map to the enum."""
        text = re.sub(r"[^a-z]", "", str(value).lower())
        if text in ("na", "notapplicable", "notnecessary", "none"):
            return cls.NA
        if text in ("present", "exercised"):
            return cls.PRESENT
        if text in ("lacking", "missing", "absent"):
            return cls.LACKING
        raise ValueError(f"label {value!r} is not one of NA, PRESENT, LACKING")


LabelMatrix = dict[str, dict[str, Label]]
"""trajectory id -> capability name -> label: one labeling run."""

_SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CandidateSpec(BaseModel):
    """One capability proposed by discovery (the canonical dictionary entry)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="snake_case, 2-5 words, general (not domain-specific).")
    definition: str = Field(description="2-3 sentences, precise enough that two analysts would label alike.")
    example_task_ids: list[str] = Field(default_factory=list, description="Task ids of trajectories that show it.")

    @field_validator("name")
    @classmethod
    def _snake(cls, v: str) -> str:
        v = v.strip()
        if len(v) > MAX_CAPABILITY_NAME or not _SNAKE.fullmatch(v):
            raise ValueError(
                f"capability name {v[:80]!r} is not snake_case (lowercase words joined by '_', at most "
                f"{MAX_CAPABILITY_NAME} characters)"
            )
        return v

    @field_validator("definition")
    @classmethod
    def _definition(cls, v: str) -> str:
        v = " ".join(v.split())
        if len(v) < 20:
            raise ValueError("definition is too short to label by (write 2-3 precise sentences)")
        return v

    @field_validator("example_task_ids", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> list[str]:
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError("example_task_ids must be a list")
        out = []
        for item in v:  # tolerate [{"task_id": ..., "note": ...}] as the released prompts ask for notes
            out.append(str(item.get("task_id", item.get("id", ""))) if isinstance(item, dict) else str(item))
        return [x for x in out if x]


class DiscoveryOutput(BaseModel):
    """What the discovery prompt asks for: `{"candidates": [...]}`."""

    model_config = ConfigDict(extra="ignore")

    candidates: list[CandidateSpec] = Field(min_length=1)

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v: list[CandidateSpec]) -> list[CandidateSpec]:
        names = [c.name for c in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate capability names: {', '.join(dupes)}")
        return v


class LabelBatchOutput(BaseModel):
    """What the labeling prompt asks for: `{"labels": {"<ref>": {"<capability>": "NA|PRESENT|LACKING"}}}`."""

    model_config = ConfigDict(extra="ignore")

    labels: dict[str, dict[str, Label]]

    @field_validator("labels", mode="before")
    @classmethod
    def _lenient(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("labels must be an object keyed by trajectory reference")
        out: dict[str, dict[str, Label]] = {}
        for ref, row in v.items():
            if not isinstance(row, dict):
                raise ValueError(f"labels[{ref!r}] must be an object mapping capability name to label")
            out[str(ref).strip()] = {str(k).strip(): Label.parse(x) for k, x in row.items()}
        return out


class DiscoveryRecord(_Strict):
    """`diagnose/discovery.json`: the canonical capability dictionary, fixed for every labeling run."""

    analyst: str
    fingerprint: str = Field(description="Hash of the diagnosed trajectories and analyst; a mismatch means redo.")
    candidates: list[CandidateSpec]
    warnings: list[str] = Field(default_factory=list)
    prompt_chars: int = 0
    created_at: float = 0.0


class LabelRunRecord(_Strict):
    """`diagnose/labels/run_<i>.json`: one complete labeling run (every trajectory x every capability)."""

    run: int
    seed: int
    analyst: str
    fingerprint: str = Field(description="Hash of trajectories, analyst and dictionary; a mismatch means redo.")
    capabilities: list[str]
    labels: LabelMatrix
    warnings: list[str] = Field(default_factory=list)
    calls: int = Field(0, description="Analyst calls made (retries included).")
    created_at: float = 0.0


class SelectionParams(_Strict):
    rho: float
    delta: float
    n_runs: int
    k: int


class CapabilitiesFile(_Strict):
    """`diagnose/capabilities.json`: C* (`selected`, ranked by mean Δ) and every candidate with its statistics.

    Each `Capability` has `status` "pending" when selected (the paper's PENDING: the synthesize stage consumes
    these) or "rejected", `example_task_ids` = task ids of its evidence, and `stats`:
    delta_mean, delta_std, cov_mean, cov_std, er_pos_mean, er_neg_mean, runs_passed, n_runs, k,
    per_run (run, delta, cov, er_pos, er_neg, passed, the four counts behind them, n_failed, n_passed,
    empty_denominators), example_failed_trajectory_ids (failed trajectories labeled LACKING in the most runs, at most
    `max_examples`), lacking_failed_runs (every failed trajectory labeled LACKING -> runs in which it was),
    example_failed_task_ids, discovery_example_task_ids (the analyst's own examples from discovery).
    """

    selected: list[Capability]
    candidates: list[Capability]
    params: SelectionParams
    splits: list[str] = Field(description="Splits whose trajectories were diagnosed.")
    n_trajectories: dict[str, Any] = Field(description="Counts: diagnosed, succeeded, failed, excluded by reason.")
    analyst: str
    warnings: list[str] = Field(default_factory=list)
    trajectories: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Per diagnosed trajectory: id, task_id, success, lacking (capabilities LACKING in most runs), "
        "reasons (the analyst's findings, one line each) and user_fault (set when the simulated user, not the agent, "
        "kept the required change from happening).",
    )
    created_at: float = 0.0


def read_capabilities(run: RunLayout) -> CapabilitiesFile:
    """The run's validated `diagnose/capabilities.json` (the one reader of it); UserError when diagnose has not run or
    the file is not a capabilities file."""
    path = run.capabilities
    if not path.exists():
        raise UserError(f"no {path}: run `trace-rl diagnose --run {run.root}` first")
    return read_model(path, CapabilitiesFile, "capabilities file")


def write_capabilities(run: RunLayout, data: CapabilitiesFile) -> Path:
    atomic_write_json(run.capabilities, data)
    return run.capabilities


def capability_definitions(run: RunLayout) -> dict[str, str]:
    """Capability name -> definition for every candidate diagnose kept (selected ones last, so theirs win); empty
    when diagnose has not run."""
    if not run.capabilities.exists():
        return {}
    data = read_capabilities(run)
    return {c.name: c.definition for c in [*data.candidates, *data.selected] if c.definition}


__all__ = [
    "CandidateSpec",
    "CapabilitiesFile",
    "DiscoveryOutput",
    "DiscoveryRecord",
    "Label",
    "LabelBatchOutput",
    "LabelMatrix",
    "LabelRunRecord",
    "SelectionParams",
    "capability_definitions",
    "read_capabilities",
    "write_capabilities",
]
