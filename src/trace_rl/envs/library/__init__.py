"""The built-in offline domain `library`: a public library's circulation desk with procedurally generated tasks.

`load_domain(rest, cfg)` is the registry's entry point (`trace_rl.envs.registry`). `make_task(family, seed)` and
`FAMILIES` let later stages generate new tasks of a family (e.g. synthesized training variants).
"""

from __future__ import annotations

from pydantic import ValidationError

from trace_rl.config import EnvConfig, format_validation_error
from trace_rl.envs.library.domain import LibraryDomain, LibraryEnvironment
from trace_rl.envs.library.families import CAPABILITY_TYPES, FAMILIES, make_task
from trace_rl.envs.library.prompt import PROMPT_VERSION, system_prompt
from trace_rl.envs.library.splits import fresh_train_seeds
from trace_rl.errors import UserError


def load_domain(rest: str, cfg: EnvConfig) -> LibraryDomain:
    """The library domain; `rest` must be empty ('library')."""
    if rest:
        raise UserError(f"environment 'library' takes no sub-name (got 'library:{rest}')")
    try:
        return LibraryDomain(cfg.options)
    except ValidationError as exc:
        raise UserError(format_validation_error(exc, "env.options (library)")) from None


__all__ = [
    "CAPABILITY_TYPES",
    "FAMILIES",
    "PROMPT_VERSION",
    "LibraryDomain",
    "LibraryEnvironment",
    "fresh_train_seeds",
    "load_domain",
    "make_task",
    "system_prompt",
]
