"""The trainer backends by name (`train.backend`): one registry entry per training engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trace_rl.errors import UserError
from trace_rl.training.protocol import TrainerBackend
from trace_rl.training.trl_backend import TRLBackend

BACKENDS: dict[str, Callable[..., TrainerBackend]] = {"trl": TRLBackend}


def make_backend(name: str, **options: Any) -> TrainerBackend:
    """The backend registered as `name`, built with `options` (e.g. TRL's `callbacks`)."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise UserError(f"unknown training backend '{name}' ({', '.join(BACKENDS)})")
    return factory(**options)


__all__ = ["BACKENDS", "make_backend"]
