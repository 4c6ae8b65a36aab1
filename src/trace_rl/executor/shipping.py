"""Shipping an episode factory or a job to another process: cloudpickle, with model clients sent as their recipe.

A model client is rebuilt in the worker from its config instead of being pickled with its live state: an
`OpenAIClient` (an HTTP client bound to the driver's event loop) becomes its `ModelConfig` with the resolved base
URL; a `LocalClient` (a torch model) becomes its config, weights folder and loaded adapters, and is built once per
worker process (`local_client` caches it). Locks and `httpx.Client`s are recreated fresh. Everything else (domains,
tasks, test clients) is plain cloudpickle. `loads` is `pickle.loads`.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any

from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.registry import build_client

_LOCAL_CLIENTS: dict[str, Any] = {}
_LOCAL_LOCK = threading.Lock()


def local_client(cfg: ModelConfig, name: str, model_path: str, adapters: dict[str, str]) -> Any:
    """A `LocalClient` for this recipe (its weights folder as the model), built once per process (episodes of every
    factory share it)."""
    cfg = cfg.model_copy(update={"model": model_path, "adapters": adapters})
    key = json.dumps([name, cfg.model_dump(mode="json")], sort_keys=True)
    with _LOCAL_LOCK:
        if key not in _LOCAL_CLIENTS:
            _LOCAL_CLIENTS[key] = build_client(cfg, name=name)
        return _LOCAL_CLIENTS[key]


def openai_client(cfg: ModelConfig, name: str) -> Any:
    """An `OpenAIClient` for one endpoint (`cfg.base_url`)."""
    return build_client(cfg, name=name)


def httpx_client(base_url: str, timeout: Any, headers: dict[str, str]) -> Any:
    import httpx

    return httpx.Client(base_url=base_url, timeout=timeout, headers=headers)


def _reducers() -> dict[type, Callable[[Any], tuple[Any, ...]]]:
    """Reducers for the types whose modules are loaded (a type that was never imported has no instance to ship)."""
    out: dict[type, Callable[[Any], tuple[Any, ...]]] = {
        type(threading.Lock()): lambda _: (threading.Lock, ()),
        type(threading.RLock()): lambda _: (threading.RLock, ()),
    }
    local = sys.modules.get("trace_rl.models.local")
    if local is not None:
        out[local.LocalClient] = lambda c: (
            local_client,
            (c.cfg, c.name, str(c.model_path), {k: str(v) for k, v in c.adapters.items()}),
        )
    remote = sys.modules.get("trace_rl.models.openai_client")
    if remote is not None:
        out[remote.OpenAIClient] = lambda c: (
            openai_client,
            (c.cfg.model_copy(update={"base_url": c.base_url, "base_urls": []}), c.name),
        )
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        out[httpx.Client] = lambda c: (httpx_client, (str(c.base_url), c.timeout, dict(c.headers)))
    return out


def dumps(obj: Any) -> bytes:
    """`obj` as bytes for a worker; a `UserError` naming the part that cannot travel."""
    from ray.cloudpickle import CloudPickler

    reducers = _reducers()

    class Shipper(CloudPickler):
        def reducer_override(self, obj: Any) -> Any:
            reduce = reducers.get(type(obj))
            if reduce is not None:
                return reduce(obj)
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    try:
        Shipper(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except (TypeError, pickle.PicklingError, AttributeError) as exc:
        raise UserError(
            f"executor 'ray': cannot send {type(obj).__name__} to the workers ({exc}); "
            "use executor.kind local (or executor.stages.<stage>: local) for this stage"
        ) from None
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return pickle.loads(data)


__all__ = ["dumps", "loads", "local_client"]
