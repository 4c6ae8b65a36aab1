"""Every observed case of tools.json (input -> output or exception, trace) reproduced by trace-rl's tools."""

from __future__ import annotations

import json
import random
import re

from trace_rl.envs.toolsandbox import data
from trace_rl.envs.toolsandbox.sandbox import TOOLS, call_tool
from trace_rl.envs.toolsandbox.tables import Tables
from trace_rl.envs.toolsandbox.tools import ToolContext

from .helpers import data_root, needs_data, scenarios

pytestmark = needs_data


def _base_world() -> Tables:
    _, by_name = scenarios()
    tables = Tables.from_initial(by_name["wifi_off"]["initial_databases"])
    defaults = {"cellular": True, "wifi": True, "location_service": True, "low_battery_mode": False}
    tables.replace("SETTING", [{**tables.snapshot("SETTING")[0], **defaults}])
    return tables


def test_every_observed_case() -> None:
    tools = data.load_tools(data_root())
    assert set(tools) == set(TOOLS)
    failures = []
    for name, tool in tools.items():
        for case in tool["observations"]:
            tables = _base_world()
            row = tables.snapshot("SETTING")[0]
            tables.replace("SETTING", [{**row, **case["setting_overrides"]}])
            result = call_tool(ToolContext(tables, data.FROZEN_NOW, random.Random(0)), name, case["arguments"])
            mask = lambda s: re.sub(r" at 0x[0-9A-Fa-f]+>", " at 0x0>", s or "")  # noqa: E731
            traces = [json.loads(t) for t in case["tool_trace"] or []]
            if (
                mask(result.content) != mask(case["output"])
                or ([json.loads(result.trace)] if result.trace else []) != traces
            ):
                failures.append(f"{name}/{case['case']}: {result.content[:80]!r} != {case['output'][:80]!r}")
    assert not failures, failures
