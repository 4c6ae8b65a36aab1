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


class Section(BaseModel):
    """A config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


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
    """A YAML mapping; a missing file, invalid YAML or a non-mapping is a one-line `UserError`."""
    if not path.exists():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}:{where} is not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of sections")
    return data


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Set dotted keys (`{"rollout.trials": 3}`) in a nested dict, in place; None values are skipped."""
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return data


__all__ = ["Section", "apply_overrides", "format_validation_error", "read_yaml", "section_with"]
