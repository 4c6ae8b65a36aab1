"""Finding and loading the ToolSandbox data package (scenarios, tools, conformance vectors), never bundled.

Resolution order: `env.data_dir`, then `TRACE_TOOLSANDBOX_DATA`, then `../shared/data/toolsandbox` relative to the
working directory and to the repository root. The data is derived from apple/ToolSandbox (commit 165848b) under
Apple's sample-code licence, whose notice travels with it as `LICENSE-ToolSandbox`. Loaded files are cached per
process and must not be mutated.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError

ENV_VAR = "TRACE_TOOLSANDBOX_DATA"
REPO_ROOT = Path(__file__).resolve().parents[4]
FILES = ("scenarios.json.gz", "tools.json", "LICENSE-ToolSandbox")
FROZEN_NOW = 1768478400.0  # 2026-01-15T12:00:00 UTC: every scenario timestamp is relative to this instant


def candidate_dirs() -> list[Path]:
    rel = Path("..") / "shared" / "data" / "toolsandbox"
    return [(Path.cwd() / rel).resolve(), (REPO_ROOT / rel).resolve()]


def resolve_data_dir(data_dir: Path | str | None = None) -> Path:
    """The data root (a folder holding scenarios.json.gz and tools.json); a UserError says where it looked."""
    if data_dir is not None:
        candidates = [Path(data_dir).expanduser()]
    elif os.environ.get(ENV_VAR):
        candidates = [Path(os.environ[ENV_VAR]).expanduser()]
    else:
        candidates = candidate_dirs()
    for path in candidates:
        if (path / "scenarios.json.gz").is_file() and (path / "tools.json").is_file():
            return path.resolve()
    looked = ", ".join(str(p) for p in dict.fromkeys(candidates))
    raise UserError(f"ToolSandbox data not found (set env.data_dir or {ENV_VAR}; looked in {looked})")


@functools.lru_cache(maxsize=4)
def load_scenarios(root: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(meta, scenarios by name) of `scenarios.json.gz`."""
    path = root / "scenarios.json.gz"
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read ToolSandbox scenarios: {exc}") from None
    if not isinstance(raw, dict) or "scenarios" not in raw or "meta" not in raw:
        raise UserError(f"{path}: expected an object with 'meta' and 'scenarios'")
    return raw["meta"], {s["name"]: s for s in raw["scenarios"]}


@functools.lru_cache(maxsize=4)
def load_tools(root: Path) -> dict[str, dict[str, Any]]:
    """The 34 tools of `tools.json` by name (schemas, descriptions, observed behaviour)."""
    path = root / "tools.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read ToolSandbox tools: {exc}") from None
    return {t["name"]: t for t in raw["tools"]}


def license_text(root: Path) -> str:
    path = root / "LICENSE-ToolSandbox"
    return path.read_text(encoding="utf-8") if path.is_file() else ""


__all__ = ["ENV_VAR", "FROZEN_NOW", "license_text", "load_scenarios", "load_tools", "resolve_data_dir"]
