"""Domain registry: `load_domain("tau2:retail" | "library" | "synthetic:<dir>", cfg)` returns a `Domain`.

Built-in domains are imported lazily; other packages can add theirs with `register_domain(prefix, factory)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from trace_rl.config import EnvConfig
from trace_rl.envs.base import Domain
from trace_rl.errors import UserError

DomainFactory = Callable[[str, EnvConfig], Domain]

_BUILTIN = {
    "tau2": "trace_rl.envs.tau2:load_domain",
    "library": "trace_rl.envs.library:load_domain",
    "synthetic": "trace_rl.envs.synthetic:load_domain",
    "toolsandbox": "trace_rl.envs.toolsandbox:load_domain",
    "openenv": "trace_rl.envs.openenv:load_domain",
    "verifiers": "trace_rl.envs.verifiers:load_domain",
}
_REGISTRY: dict[str, DomainFactory] = {}


def register_domain(prefix: str, factory: DomainFactory) -> None:
    _REGISTRY[prefix] = factory


def _factory(prefix: str) -> DomainFactory:
    if prefix in _REGISTRY:
        return _REGISTRY[prefix]
    target = _BUILTIN.get(prefix)
    if target is None:
        known = ", ".join(sorted({*_BUILTIN, *_REGISTRY}))
        raise UserError(f"unknown environment '{prefix}' (known: {known})")
    module, attr = target.split(":")
    try:
        factory: Any = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise UserError(f"environment '{prefix}' is not available in this build") from None
    return factory


def load_domain(name: str, cfg: EnvConfig | None = None) -> Domain:
    """`name` is '<prefix>' or '<prefix>:<rest>', e.g. 'tau2:retail'."""
    cfg = cfg or EnvConfig(name=name)
    prefix, _, rest = name.partition(":")
    return _factory(prefix)(rest, cfg)
