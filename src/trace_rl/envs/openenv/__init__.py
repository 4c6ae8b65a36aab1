"""OpenEnv environments as trace-rl targets: `openenv:<folder>` (a package folder with `openenv.yaml`) or
`openenv:<module>[:Class]` (an importable module exposing an OpenEnv `Environment`).

`load_domain(rest, cfg)` is what `trace_rl.envs.registry.load_domain("openenv:<rest>", cfg)` calls. The environment
runs in process through OpenEnv's own classes (no server, container or network). The mapping, in `domain.py`: tasks
are seeds (options n_train / n_test / test_offset), an MCP environment's tools are the agent's tools and any other
environment gets one `act` tool taking its Action's fields; the agent's text ends the episode; the episode's return
becomes trace-rl's reward in units of the success threshold (option success_threshold, default 1.0), capped at 1.
Departures: see docs/formats.md, "OpenEnv".
"""

from __future__ import annotations

from trace_rl.config import EnvConfig
from trace_rl.envs.openenv.domain import OpenEnvDomain, OpenEnvEnvironment, OpenEnvOptions


def load_domain(rest: str, cfg: EnvConfig) -> OpenEnvDomain:
    """`rest` is the folder or module after 'openenv:'."""
    return OpenEnvDomain(rest, cfg)


__all__ = ["OpenEnvDomain", "OpenEnvEnvironment", "OpenEnvOptions", "load_domain"]
