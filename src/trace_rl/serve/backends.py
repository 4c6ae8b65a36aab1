"""Where the proxy sends a routed request: a vLLM multi-LoRA server, or the base model in process.

`VLLMBackend` forwards the request body unchanged except for `model` (the adapter's served name, or the base model's:
the request's model selects the adapter, docs/integration-notes.md §1) and passes the answer through byte for byte: JSON
as it came, streams (SSE) chunk by chunk as they arrive, errors with their status. The served names come from the
server's `/v1/models` (the base is the entry without a parent), refreshed every few seconds so adapters loaded at
runtime (`/v1/load_lora_adapter`) become routable. What clients see of the backend holds no paths or addresses:
`/v1/models` entries lose vLLM's `root` (the model or adapter folder), health and connection errors name no URL
(the log does), and the base model's context (`max_model_len`) is kept so the proxy can cap `max_tokens`.

`LocalBackend` answers with trace-rl's `LocalClient` (transformers + PEFT adapters): one generation at a time, in a
worker thread. Streaming there is emulated: the finished turn is sent as SSE chunks (role, content, tool calls, finish).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from starlette.responses import JSONResponse, Response, StreamingResponse

from trace_rl.errors import UserError
from trace_rl.routing.router import api_root
from trace_rl.serve.wire import (
    WireError,
    chat_messages,
    completion_json,
    error_body,
    messages_from_openai,
    sampling_from_body,
    stream_chunks,
)

if TYPE_CHECKING:
    from trace_rl.models.local import LocalClient

log = logging.getLogger(__name__)

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass
class ServedModels:
    """What a backend serves: the base model's name, the adapters' names, and `/v1/models` entries for them."""

    base: str
    adapters: list[str]
    entries: list[dict[str, Any]] = field(default_factory=list)
    context_length: int | None = None  # the base model's context, when the backend says (vLLM: max_model_len)

    @property
    def names(self) -> set[str]:
        return {self.base, *self.adapters}


class Backend(Protocol):
    """A chat-completions server the proxy forwards routed requests to."""

    kind: str

    async def models(self, *, refresh: bool = False) -> ServedModels: ...

    async def chat(self, body: dict[str, Any], model: str) -> Response: ...

    async def health(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


def upstream_error(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(message, status, "upstream_error"), status_code=status)


def public_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A `/v1/models` entry without file-system paths (vLLM's `root` is the model or adapter folder)."""
    out = {k: v for k, v in entry.items() if k != "root"}
    root = entry.get("root")
    if isinstance(root, str) and "/" not in root and "\\" not in root:
        out["root"] = root  # a hub id or a name, not a path
    return out


def context_of(entries: list[dict[str, Any]], base: str) -> int | None:
    for entry in entries:
        value = entry.get("max_model_len")
        if entry.get("id") == base and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class VLLMBackend:
    """An OpenAI-compatible server with the adapters loaded (vLLM `--enable-lora --lora-modules ...`)."""

    kind = "vllm"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_connections: int = 512,
        models_ttl_s: float = 5.0,
        keepalive_s: float = 2.0,
        retries: int = 1,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """`keepalive_s` stays below the server's idle timeout (uvicorn: 5 s), so a pooled connection is not reused
        just as the server closes it; `retries` resends a request whose connection failed before any answer
        (a generation has no side effects, so a resend is safe)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = api_root(base_url)
        self.client = client or httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=keepalive_s
            ),
        )
        self.retries = retries
        self.models_ttl_s = models_ttl_s
        self._models: ServedModels | None = None
        self._models_at = 0.0
        self._models_lock = asyncio.Lock()

    async def models(self, *, refresh: bool = False) -> ServedModels:
        """The served models, cached for `models_ttl_s` seconds (refresh=True re-reads them)."""
        async with self._models_lock:
            fresh = self._models is not None and time.monotonic() - self._models_at < self.models_ttl_s
            if fresh and not refresh:
                assert self._models is not None
                return self._models
            try:
                resp = await self._send(self.client.build_request("GET", "/v1/models"), stream=False)
                resp.raise_for_status()
                entries = list(resp.json().get("data") or [])
            except (httpx.HTTPError, ValueError) as exc:
                if self._models is not None:  # keep serving with the last known list
                    return self._models
                raise UserError(f"cannot list the models of {self.base_url}: {exc}") from None
            bases = [e["id"] for e in entries if not e.get("parent")]
            if not bases:
                raise UserError(f"{self.base_url}/v1/models lists no base model")
            adapters = [e["id"] for e in entries if e.get("parent")]
            self._models = ServedModels(
                base=bases[0],
                adapters=adapters,
                entries=[public_entry(e) for e in entries if isinstance(e, dict)],
                context_length=context_of(entries, bases[0]),
            )
            self._models_at = time.monotonic()
            return self._models

    async def _send(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        """Send, resending after a connection failure (not after a timeout) up to `retries` times."""
        for attempt in range(self.retries + 1):
            try:
                return await self.client.send(request, stream=stream)
            except httpx.TimeoutException:
                raise
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise
                log.info("upstream %s: %s; resending (%d/%d)", request.url.path, exc, attempt + 1, self.retries)
        raise AssertionError("unreachable")

    async def chat(self, body: dict[str, Any], model: str) -> Response:
        payload = {**body, "model": model}
        request = self.client.build_request("POST", "/v1/chat/completions", json=payload)
        stream = bool(body.get("stream"))
        try:
            upstream = await self._send(request, stream=stream)
            media_type = upstream.headers.get("content-type", "application/json")
            if not stream or upstream.status_code >= 400:
                content = await upstream.aread()
                await upstream.aclose()
                return Response(content=content, status_code=upstream.status_code, media_type=media_type)
        except httpx.TimeoutException as exc:
            log.warning("upstream %s timed out: %s", self.base_url, exc)
            return upstream_error(504, "upstream timed out")
        except httpx.TransportError as exc:
            log.warning("upstream %s unreachable: %s: %s", self.base_url, type(exc).__name__, exc)
            return upstream_error(502, f"upstream unreachable ({type(exc).__name__})")

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_bytes():
                    yield chunk
            finally:  # also on client disconnect: closing the upstream stream lets vLLM abort the request
                await upstream.aclose()

        return StreamingResponse(relay(), status_code=upstream.status_code, media_type=media_type, headers=SSE_HEADERS)

    async def health(self) -> dict[str, Any]:
        try:
            resp = await self.client.get("/health", timeout=5.0)
            return {"ok": resp.status_code == 200, "status": resp.status_code}
        except httpx.HTTPError as exc:  # the upstream's address stays in the log, not in the answer
            log.warning("upstream %s health: %s: %s", self.base_url, type(exc).__name__, exc)
            return {"ok": False, "error": type(exc).__name__}

    async def aclose(self) -> None:
        await self.client.aclose()


class LocalBackend:
    """The base model and its PEFT adapters in process (`LocalClient`); for CPU use and tests."""

    kind = "local"
    max_concurrent = 1  # the model generates one turn at a time: others wait in the proxy's queue, not in threads

    def __init__(self, client: LocalClient, *, base_name: str = "base", max_tokens: int | None = None) -> None:
        self.client = client
        self.base_name = base_name
        self.max_tokens = max_tokens

    async def models(self, *, refresh: bool = False) -> ServedModels:
        adapters = sorted(self.client.adapters)
        created = int(time.time())
        context = self.context_length()
        base = {"id": self.base_name, "object": "model", "created": created, "owned_by": "trace-rl"}
        entries = [base | ({"max_model_len": context} if context else {})]
        entries += [
            {"id": name, "object": "model", "created": created, "owned_by": "trace-rl", "parent": self.base_name}
            for name in adapters
        ]
        return ServedModels(base=self.base_name, adapters=adapters, entries=entries, context_length=context)

    def context_length(self) -> int | None:
        """The base model's context (`max_position_embeddings`, else the tokenizer's `model_max_length`)."""
        config = getattr(getattr(self.client, "model", None), "config", None)
        value = getattr(config, "max_position_embeddings", None)
        if not isinstance(value, int) or value <= 0:
            value = getattr(getattr(self.client, "tokenizer", None), "model_max_length", None)
        return value if isinstance(value, int) and 0 < value < 10_000_000 else None

    async def chat(self, body: dict[str, Any], model: str) -> Response:
        try:
            messages = messages_from_openai(chat_messages(body))
            sampling = sampling_from_body(body, default_max_tokens=self.max_tokens or self.client.cfg.max_tokens)
        except WireError as exc:
            return JSONResponse(error_body(str(exc), exc.status, param=exc.param), status_code=exc.status)
        adapter = None if model == self.base_name else model
        try:
            resp = await self.client.chat(messages, body.get("tools"), adapter=adapter, sampling=sampling)
        except UserError as exc:
            return JSONResponse(error_body(str(exc), 404, "not_found_error"), status_code=404)
        completion = completion_json(resp, model=model)
        if not body.get("stream"):
            return JSONResponse(completion)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = stream_chunks(completion, include_usage=include_usage)

        async def replay() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return StreamingResponse(replay(), media_type="text/event-stream", headers=SSE_HEADERS)

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "model": self.base_name, "adapters": sorted(self.client.adapters)}

    async def aclose(self) -> None:
        await self.client.aclose()


__all__ = ["Backend", "LocalBackend", "ServedModels", "VLLMBackend"]
