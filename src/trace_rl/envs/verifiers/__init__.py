"""verifiers environments as trace-rl targets: `verifiers:<module>` (an installed verifiers 0.4.0 environment package,
resolved by verifiers' own loader). `load_domain(rest, cfg)` is what the registry calls; the mapping is in `domain.py`
and docs/formats.md, "verifiers"."""

from __future__ import annotations

from trace_rl.config import EnvConfig
from trace_rl.envs.verifiers.domain import VerifiersDomain, VerifiersEnvironment, VerifiersOptions


def load_domain(rest: str, cfg: EnvConfig) -> VerifiersDomain:
    """`rest` is the environment id after 'verifiers:' (a module name or a hub id `owner/name`)."""
    return VerifiersDomain(rest, cfg)


__all__ = ["VerifiersDomain", "VerifiersEnvironment", "VerifiersOptions", "load_domain"]
