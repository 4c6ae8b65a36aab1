"""`manifest.json`: what a run directory is — its config, the versions and git sha that produced it, the commands run
and one record per stage.

The manifest carries `layout_version` (artifacts/layout.py `LAYOUT_VERSION`); a manifest written before the field
existed is version 1. `read_manifest` refuses a run written by a newer layout with one line instead of half-reading it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from trace_rl.artifacts.layout import LAYOUT_VERSION
from trace_rl.errors import UserError, first_problem
from trace_rl.types import Record


class StageRecord(Record):
    status: Literal["running", "done", "failed"] = "running"
    command: str | None = Field(None, description="The command line that ran the stage (`trace-rl run ...` too).")
    started_at: float = 0.0
    ended_at: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    summary: dict[str, Any] = Field(default_factory=dict)


class RunManifest(Record):
    """What a run directory is: its config, the versions and git sha that produced it, and the stages run."""

    name: str
    layout_version: int = Field(1, ge=1, description="Run-directory layout the run was written with (absent: 1).")
    created_at: float
    trace_rl_version: str
    git_sha: str | None = None
    git_dirty: bool | None = None
    python: str = ""
    platform: str = ""
    packages: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    commands: list[str] = Field(default_factory=list)
    stages: dict[str, StageRecord] = Field(default_factory=dict)


def read_manifest(path: Path) -> RunManifest:
    """The manifest at `path`, validated; a missing, malformed or too new one is a `UserError` naming the file."""
    from trace_rl.artifacts.store import read_json  # store.py's RunDir imports this module

    path = Path(path)
    if not path.exists():
        raise UserError(f"{path.parent} is not a trace-rl run (no {path.name})")
    data = read_json(path)
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a valid run manifest: not a JSON object")
    version = data.get("layout_version", 1)
    if isinstance(version, int) and version > LAYOUT_VERSION:
        raise UserError(
            f"{path.parent} was written with run-directory layout {version}; this trace-rl reads layouts up to "
            f"{LAYOUT_VERSION} (upgrade trace-rl)"
        )
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path} is not a valid run manifest: {first_problem(exc)}") from None


__all__ = ["RunManifest", "StageRecord", "read_manifest"]
