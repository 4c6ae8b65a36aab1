"""What an OpenAI-compatible server serves (its `/models` list), checked before a command spends any work on it."""

from __future__ import annotations

import os

import httpx

from trace_rl.config import ModelConfig
from trace_rl.errors import UserError

BASE_MODEL_NAMES = frozenset({"", "base", "__base__"})
"""Adapter names that mean the base model (no adapter)."""


def served_models(model_cfg: ModelConfig, timeout_s: float = 5.0) -> list[str] | None:
    """Names listed by an OpenAI-compatible server's /models, or None when it cannot tell (down, no such route)."""
    base = next(iter(model_cfg.endpoints()), None)
    if not base:
        return None
    key = model_cfg.api_key or os.environ.get(model_cfg.api_key_env) or "EMPTY"
    try:
        resp = httpx.get(f"{base.rstrip('/')}/models", headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s)
        resp.raise_for_status()
        return [str(m["id"]) for m in resp.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def check_served(name: str, model_cfg: ModelConfig, adapter: str | None) -> None:
    """An OpenAI-compatible server that answers /models must serve the model (and adapter) asked for."""
    if model_cfg.kind != "openai":
        return
    listed = served_models(model_cfg)
    if listed is None:
        return
    wanted = adapter if adapter not in (None, *BASE_MODEL_NAMES) else model_cfg.model
    if wanted not in listed:
        shown = ", ".join(listed[:10]) + (" ..." if len(listed) > 10 else "")
        where = next(iter(model_cfg.endpoints()), None)
        raise UserError(f"model '{name}': the server at {where} does not serve '{wanted}' (it serves {shown})")
