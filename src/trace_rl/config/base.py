"""What every config section shares: a strict pydantic base, YAML reading, dotted overrides, one-line errors.

The section modules (`config/diagnose.py`, ...) import this module, and `config/core.py` composes them, so nothing
here may import a section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from trace_rl.errors import UserError

MAX_REPORTED_PROBLEMS = 10
MAX_TRIALS = 1000
"""Trials per task at most (rollout, evaluate): 1,000,000 planned pairs could never be shrunk and made `report` run
for minutes; pass^k needs k ≤ trials, and no published protocol uses more than a few dozen."""


class Section(BaseModel):
    """A config section: unknown keys are errors, and no float may be NaN or infinite (`temperature: .nan` would be
    accepted and then make every rerun's sampling identity differ from the recorded one)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def format_validation_error(err: ValidationError, source: str, within: str | None = None) -> str:
    """One line per problem, each naming its field: `<source>: train.max_steps: Input should be ...` (`within`: the
    section the validated model is, prefixed to the field)."""
    lines = []
    for problem in err.errors()[:MAX_REPORTED_PROBLEMS]:
        loc = ".".join(str(p) for p in (within, *problem["loc"]) if p is not None) or "<root>"
        lines.append(f"{source}: {loc}: {problem['msg']}")
    if err.error_count() > MAX_REPORTED_PROBLEMS:
        lines.append(f"{source}: ... and {err.error_count() - MAX_REPORTED_PROBLEMS} more")
    return "\n".join(lines)


SectionT = TypeVar("SectionT", bound=Section)


def section_with(section: SectionT, changes: dict[str, Any], name: str, source: str) -> SectionT:
    """`section` (the `name` section of a config) with `changes` (field -> value; None sets None) applied and
    validated; a one-line `UserError` per problem names `<source>: <name>.<field>`."""
    try:
        return type(section).model_validate({**section.model_dump(), **changes})
    except ValidationError as err:
        raise UserError(format_validation_error(err, source, within=name)) from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping; a missing file, a directory, unreadable or non-UTF-8 bytes, invalid YAML or a non-mapping is a
    one-line `UserError`."""
    if not path.exists():
        raise UserError(f"config file not found: {path}")
    if not path.is_file():
        raise UserError(f"config {path} is not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}:{where} is not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of sections")
    return data


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None, source: str = "config") -> dict[str, Any]:
    """Set dotted keys (`{"rollout.trials": 3}`) in a nested dict, in place; None values are skipped. A section that
    is not a mapping (`rollout: 3`) cannot take an override: a one-line `UserError` naming it."""
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for depth, part in enumerate(parents, start=1):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(parents[:depth])
                raise UserError(
                    f"{source}: {where}: must be a mapping of settings, not {type(node).__name__} (cannot set {dotted})"
                )
        node[leaf] = value
    return data


__all__ = ["MAX_TRIALS", "Section", "apply_overrides", "format_validation_error", "read_yaml", "section_with"]
