"""Model kinds: a registry from `ModelConfig.kind` to the function that builds its client, and the one factory.

`@model_kind("name")` registers a builder `(cfg, name) -> ModelClient`; `build_client` looks the kind up. The kinds:
`openai` (any OpenAI-compatible server; several `base_urls` become one `EndpointPool`), `vllm` (a local model folder
sampled by a vLLM server from token ids, the server started by trace-rl unless `base_url` names one; in process,
with a log line saying why, where no vLLM environment exists), `local`
(transformers + PEFT in process), `tiny` (the local backend on the tiny random model) and `scripted` (plays back
`script`: dry runs and tests, `scripted.py`). Every command gets its clients from `build_clients` / `ModelClients`,
which build each config model once, on first use. The client modules are imported inside the builders, so naming a
kind never loads torch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from trace_rl.errors import UserError

if TYPE_CHECKING:
    from trace_rl.config import ModelConfig, TraceConfig
    from trace_rl.models.base import ModelClient

log = logging.getLogger(__name__)

ClientBuilder = Callable[["ModelConfig", str], "ModelClient"]

MODEL_KINDS: dict[str, ClientBuilder] = {}


def model_kind(kind: str) -> Callable[[ClientBuilder], ClientBuilder]:
    """Register the decorated function as the builder of `kind`'s clients."""

    def register(builder: ClientBuilder) -> ClientBuilder:
        MODEL_KINDS[kind] = builder
        return builder

    return register


def build_client(cfg: ModelConfig, *, name: str) -> ModelClient:
    """The client for the model section `cfg`, called `name`, built by its kind's builder."""
    builder = MODEL_KINDS.get(cfg.kind)
    if builder is None:
        raise UserError(f"model '{name}': unknown kind '{cfg.kind}' ({', '.join(MODEL_KINDS)})")
    return builder(cfg, name)


class ModelClients(dict[str, "ModelClient"]):
    """One command's model clients by config model name: the given ones (tests) as they are, every other name built
    from `cfg.models` the first time it is looked up (`clients[name]`; `get` and `in` never build). `aclose` closes
    the built ones only."""

    def __init__(self, cfg: TraceConfig, given: Mapping[str, ModelClient] | None = None) -> None:
        super().__init__(given or {})
        self.cfg = cfg
        self.built: list[ModelClient] = []

    def __missing__(self, name: str) -> ModelClient:
        client = build_client(self.cfg.model(name), name=name)
        self[name] = client
        self.built.append(client)
        return client

    async def aclose(self) -> None:
        """Close the clients built here and forget them (a later lookup builds afresh); a client that fails to close
        is dropped all the same."""
        for client in self.built:
            with contextlib.suppress(Exception):
                await client.aclose()
        for name in [n for n, c in self.items() if any(c is b for b in self.built)]:
            del self[name]
        self.built.clear()


def build_clients(
    cfg: TraceConfig, names: Iterable[str] = (), *, given: Mapping[str, ModelClient] | None = None
) -> ModelClients:
    """The clients of `names` (config model names), built now unless given; others are built on first lookup."""
    clients = ModelClients(cfg, given)
    for name in dict.fromkeys(names):
        clients[name]  # the lookup builds it
    return clients


@model_kind("openai")
def openai_client(cfg: ModelConfig, name: str) -> ModelClient:
    from trace_rl.models.openai_client import OpenAIClient

    if len(cfg.base_urls) > 1:  # several servers of one model: an episode-sticky, load-balanced pool
        from trace_rl.models.pool import EndpointPool

        one = [cfg.model_copy(update={"base_url": url, "base_urls": []}) for url in cfg.base_urls]
        return EndpointPool([OpenAIClient(c, name=name) for c in one], name=name)
    if cfg.base_urls:
        cfg = cfg.model_copy(update={"base_url": cfg.base_urls[0], "base_urls": []})
    return OpenAIClient(cfg, name=name)


def _in_process_client(cfg: ModelConfig, name: str, model: str) -> ModelClient:
    from trace_rl.models.local import LocalClient
    from trace_rl.models.resolve import resolve_model_path

    return LocalClient(cfg, name=name, model_path=resolve_model_path(model))


@model_kind("local")
def local_client(cfg: ModelConfig, name: str) -> ModelClient:
    if not cfg.model:
        raise UserError(f"model '{name}': kind 'local' needs `model` (a folder, alias or cached id)")
    return _in_process_client(cfg, name, cfg.model)


@model_kind("tiny")
def tiny_client(cfg: ModelConfig, name: str) -> ModelClient:
    """The local backend; `model` defaults to the tiny random model."""
    return _in_process_client(cfg, name, cfg.model or "tiny")


@model_kind("vllm")
def vllm_client(cfg: ModelConfig, name: str) -> ModelClient:
    """A local model folder sampled by a vLLM server: the one at `base_url` when set, else one trace-rl starts."""
    from trace_rl.models.managed_server import ExternalServer, server_for, vllm_available
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.models.vllm_client import VLLMClient

    if not cfg.model:
        raise UserError(f"model '{name}': kind 'vllm' needs `model` (a folder, alias or cached id)")
    path = resolve_model_path(cfg.model)
    url = next(iter(cfg.endpoints()), None) if (cfg.base_url or cfg.base_urls) else None
    if url is None and (why := vllm_available()) is not None:  # no server to start here: the in-process path
        log.warning("model '%s': sampling in process with transformers (no vLLM here: %s)", name, why)
        return _in_process_client(cfg, name, cfg.model)
    server = ExternalServer(url) if url else server_for(path, cfg.server)
    return VLLMClient(cfg, name=name, model_path=path, server=server)


@model_kind("scripted")
def scripted_client(cfg: ModelConfig, name: str) -> ModelClient:
    from trace_rl.models.scripted import ScriptedClient

    return ScriptedClient(cfg.script, name=name)
