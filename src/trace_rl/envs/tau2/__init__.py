"""τ²-bench-compatible environments: the `mock`, `retail` and `airline` domains (sierra-research/tau2-bench, MIT).

`load_domain("retail", cfg)` is what `trace_rl.envs.registry.load_domain("tau2:retail", cfg)` calls. Data is read from
the τ² data directory (see `data.py`), never bundled. Behaviour follows upstream τ²-bench
(docs/tau2-fidelity.md); upstream quirks that change rewards are reproduced and switchable (`quirks.py`).
"""

from __future__ import annotations

from trace_rl.config import EnvConfig
from trace_rl.envs.tau2.domain import Tau2Domain
from trace_rl.envs.tau2.quirks import QUIRKS


def load_domain(rest: str, cfg: EnvConfig) -> Tau2Domain:
    """`rest` is the domain name after 'tau2:' ('retail', 'airline' or 'mock')."""
    return Tau2Domain(rest, cfg)


__all__ = ["QUIRKS", "Tau2Domain", "load_domain"]
