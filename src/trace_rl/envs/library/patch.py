"""Scenario patches: the difference between a generated world and a task's starting world, as a deep-merge update.

A task stores only this patch (in `initial_state.initialization_data.agent_data`); the environment rebuilds the world
from its seed and deep-merges the patch (`trace_rl.envs.state.deep_merge`), so tasks stay small. Patches can add and
change records but never delete them; `world_patch` refuses a scenario that deletes.
"""

from __future__ import annotations

from typing import Any

from trace_rl.envs.state import deep_merge


def dict_patch(before: dict[str, Any], after: dict[str, Any], path: str = "") -> dict[str, Any]:
    """The smallest update `u` with `deep_merge(before, u) == after`; raises if `after` lacks a key of `before`."""
    missing = sorted(set(before) - set(after))
    if missing:
        raise ValueError(f"a scenario patch cannot delete {path or '<root>'}.{missing[0]}")
    out: dict[str, Any] = {}
    for key, value in after.items():
        if key not in before:
            out[key] = value
        elif isinstance(value, dict) and isinstance(before[key], dict):
            sub = dict_patch(before[key], value, f"{path}.{key}")
            if sub:
                out[key] = sub
        elif value != before[key]:
            out[key] = value
    return out


def world_patch(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """`dict_patch`, checked: merging the patch back must give `after` exactly."""
    patch = dict_patch(before, after)
    if deep_merge(before, patch) != after:
        raise AssertionError("scenario patch does not reproduce the scenario world")
    return patch
