"""ToolSandbox (Apple; Lu et al. 2024) as a trace-rl target domain, implemented from its exported data.

`load_domain("base_offline", cfg)` is what `trace_rl.envs.registry.load_domain("toolsandbox:base_offline", cfg)`
calls. The scenarios, tools and conformance vectors are read from the data package (`data.py`); its data is derived
from apple/ToolSandbox (commit 165848b) and carries Apple's licence notice (`LICENSE-ToolSandbox`). Modules: `tables`
(versioned world databases), `tools` / `utilities` (the 34 tools), `sandbox` (message log and tool execution),
`similarity` / `evaluation` (milestones, minefields, DAG matching), `episode` (conversation -> episode -> score),
`user`, `domain`. See docs/toolsandbox.md.
"""

from __future__ import annotations

from trace_rl.config import EnvConfig
from trace_rl.envs.toolsandbox.domain import TASK_SETS, ToolSandboxDomain, ToolSandboxEnvironment


def load_domain(rest: str, cfg: EnvConfig) -> ToolSandboxDomain:
    """`rest` is the task set after 'toolsandbox:' (default base_offline)."""
    return ToolSandboxDomain(rest, cfg)


__all__ = ["TASK_SETS", "ToolSandboxDomain", "ToolSandboxEnvironment", "load_domain"]
