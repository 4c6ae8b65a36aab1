"""Shared fixtures for the ToolSandbox tests: the data package (skip when absent) and vector replay."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from trace_rl.envs.toolsandbox import data
from trace_rl.envs.toolsandbox.sandbox import Sandbox
from trace_rl.envs.toolsandbox.tables import STAMP, Tables
from trace_rl.errors import UserError


@lru_cache(maxsize=1)
def data_root() -> Path | None:
    try:
        return data.resolve_data_dir()
    except UserError:
        return None


needs_data = pytest.mark.skipif(data_root() is None, reason="ToolSandbox data (../shared/data/toolsandbox) absent")


@lru_cache(maxsize=1)
def vectors() -> list[dict[str, Any]]:
    root = data_root()
    if root is None or not (root / "vectors_dev.jsonl").is_file():
        return []
    with open(root / "vectors_dev.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def scenarios() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    root = data_root()
    assert root is not None
    return data.load_scenarios(root)


def recorded_tables(vector: dict[str, Any], scenario: dict[str, Any]) -> Tables:
    """The tables of a vector's recorded timeline and database history (headguards restored)."""
    init = scenario["initial_databases"]
    cols = {n: [c["name"] for c in init[n]["columns"]] for n in init}

    def headguard(n: str) -> dict[str, Any]:
        return {c: (0 if c == STAMP else None) for c in cols[n]}

    rows = {"SANDBOX": [headguard("SANDBOX")] + [{c: m.get(c) for c in cols["SANDBOX"]} for m in vector["timeline"]]}
    for n in ("SETTING", "CONTACT", "MESSAGING", "REMINDER"):
        rows[n] = [headguard(n), *vector["databases_history"][n]]
    return Tables(cols, rows)


def replay_steps(vector: dict[str, Any], scenario: dict[str, Any]) -> Sandbox:
    """Play a vector's scripted agent steps with its scripted user ('Yes, go ahead.' while the agent has steps,
    then end_conversation; an agent out of steps after a tool result says 'Done.')."""
    sandbox = Sandbox(scenario, data.FROZEN_NOW)
    to_agent = {b: a for a, b in (scenario.get("agent_to_execution_tool_name") or {}).items()}
    steps, i = vector["agent_steps"], 0
    while sandbox.active and sandbox.new_messages < scenario["max_messages"]:
        if i < len(steps):
            step = steps[i]
            i += 1
            if step["type"] == "tool_call":
                sandbox.agent_calls([(to_agent.get(step["name"], step["name"]), step["arguments"])])
                continue
            sandbox.say("AGENT", step["content"])
        else:
            sandbox.say("AGENT", "Done.")
        if sandbox.new_messages >= scenario["max_messages"]:
            break
        if i < len(steps):
            sandbox.say("USER", "Yes, go ahead.")
        else:
            sandbox.end_conversation()
    return sandbox
