"""`OpenAIClient`: chat with tools against any OpenAI-compatible server (vLLM, SGLang, llama.cpp, hosted).

Built on the official `openai` SDK (`AsyncOpenAI`, its own retries off) with our retry loop: bounded retries with
exponential backoff and jitter on timeouts, connection errors, 429 and 5xx, each attempt counted and logged; other 4xx
fail at once. What survives the retries raises `InfraError(kind, message)` with kind `timeout`, `connection`,
`rate_limit`, `http_5xx`, `http_4xx` or `context_length` (a 400 for a prompt longer than the model's context; the
orchestrator scores that episode as an agent failure, since retrying cannot help). Any other 400 or 422 is a request
the server refuses as it is (e.g. `tool_choice` on a server without a tool-call parser): a configuration error,
`UserError`, one line. A semaphore bounds the requests in
flight. `adapter` becomes the request's `model` (vLLM multi-LoRA serves each adapter under its own name). With
`return_token_ids`, vLLM's prompt and completion token ids (and log-probabilities) fill `Message.sampled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import openai

from trace_rl.config import ModelConfig
from trace_rl.errors import InfraError, UserError
from trace_rl.models.base import ModelResponse, SamplingParams
from trace_rl.models.chat_format import normalize_tools, to_openai_messages
from trace_rl.models.toolcall_parse import has_tool_call_markup, parse_arguments, parse_completion
from trace_rl.types import Message, SampledTokens, ToolCall

log = logging.getLogger(__name__)

RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limit", "http_5xx"})


@dataclass
class ClientStats:
    """Counters over the client's lifetime; `last_attempts` is the attempt count of the latest finished request."""

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    last_attempts: int = 0


class _AttemptError(Exception):
    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner.get("message"), str):
            return inner["message"]
    return exc.message


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


CONTEXT_OVERFLOW = re.compile(
    r"context length|context window|maximum model length|too many tokens|prompt is too long", re.IGNORECASE
)


def _classify(exc: BaseException) -> _AttemptError:
    """Map an SDK exception to our error kinds."""
    if isinstance(exc, openai.APITimeoutError | asyncio.TimeoutError):
        return _AttemptError("timeout", "request timed out")
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return _AttemptError("connection", f"{exc.message}{f' ({cause})' if cause else ''}")
    if isinstance(exc, openai.APIStatusError):
        msg = f"HTTP {exc.status_code}: {_server_message(exc)}"
        if exc.status_code == 429:
            return _AttemptError("rate_limit", msg, _retry_after(exc))
        if exc.status_code >= 500:
            return _AttemptError("http_5xx", msg, _retry_after(exc))
        if exc.status_code == 408:
            return _AttemptError("timeout", msg)
        if exc.status_code == 400 and CONTEXT_OVERFLOW.search(msg):
            return _AttemptError("context_length", msg)
        return _AttemptError("http_4xx", msg)
    if isinstance(exc, openai.APIError):  # e.g. a response body that is not a chat completion
        return _AttemptError("http_5xx", f"bad response: {exc}")
    raise exc


def _find(data: dict[str, Any], choice: dict[str, Any], *keys: str) -> Any:
    """The first of `keys` present (not None) on the choice, its message, or the response."""
    for where in (choice, choice.get("message") or {}, data):
        for key in keys:
            if where.get(key) is not None:
                return where[key]
    return None


def _tool_calls(raw_calls: list[dict[str, Any]], prefix: str) -> list[ToolCall]:
    calls = []
    for i, tc in enumerate(raw_calls):
        fn = tc.get("function") or {}
        raw_args = fn.get("arguments")
        args, err = parse_arguments(raw_args)
        calls.append(
            ToolCall(
                id=tc.get("id") or f"{prefix}_{i}",
                name=fn.get("name") or "",
                arguments=args,
                parse_error=err,
                raw=raw_args if isinstance(raw_args, str) else None,
            )
        )
    return calls


def message_from_choice(choice: dict[str, Any], *, id_prefix: str) -> Message:
    """An assistant `Message` from a chat-completion choice (server-parsed tool calls, or `<tool_call>` text)."""
    msg = choice.get("message") or {}
    content = msg.get("content")
    if msg.get("tool_calls"):
        thought = content.strip() if isinstance(content, str) and content.strip() else None
        return Message(role="assistant", tool_calls=_tool_calls(msg["tool_calls"], id_prefix), thought=thought)
    if has_tool_call_markup(content):
        return parse_completion(content, id_prefix=id_prefix)
    return Message(role="assistant", content=content or "")


def sampled_from_response(data: dict[str, Any], choice: dict[str, Any]) -> SampledTokens | None:
    """vLLM's `return_token_ids` fields (prompt ids on the response or the choice, `token_ids` on the choice) and
    log-probabilities; None when the server sent no completion ids."""
    completion = _find(data, choice, "token_ids", "completion_token_ids", "output_token_ids")
    if completion is None:
        return None
    prompt = _find(data, choice, "prompt_token_ids")
    content = (choice.get("logprobs") or {}).get("content")
    logprobs = [float(t["logprob"]) for t in content] if content else None
    return SampledTokens(
        prompt_ids=[int(t) for t in prompt] if prompt is not None else None,
        completion_ids=[int(t) for t in completion],
        logprobs=logprobs,
    )


def is_official_openai(base_url: str | None) -> bool:
    """Whether requests go to api.openai.com, which rejects vLLM's extra request fields."""
    if base_url is None:
        return True
    host = urlparse(base_url).hostname or ""
    return host == "api.openai.com" or host.endswith(".openai.com")


class OpenAIClient:
    """An OpenAI-compatible endpoint with retries, a concurrency limit, adapters as model names, and token ids."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        name: str = "openai",
        logprobs: bool | None = None,
        max_backoff_s: float = 30.0,
        seed: int | None = None,
    ) -> None:
        """`logprobs` defaults to `cfg.return_token_ids`; `seed` seeds the backoff jitter (tests)."""
        if not cfg.model:
            raise UserError(f"model '{name}': kind 'openai' needs `model` (the served model name)")
        self.name = name
        self.cfg = cfg
        self.model = cfg.model
        self.base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key = cfg.api_key or os.environ.get(cfg.api_key_env) or "EMPTY"
        official = is_official_openai(self.base_url)
        self.return_token_ids = cfg.return_token_ids and not official
        self.logprobs = self.return_token_ids if logprobs is None else logprobs
        self.max_backoff_s = max_backoff_s
        self.stats = ClientStats()
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._sem: asyncio.Semaphore | None = None

    def _bind(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        """The SDK client and semaphore of the running event loop (new ones when a new loop runs this client)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None or self._sem is None:
            self._loop = loop
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, timeout=self.cfg.timeout_s, max_retries=0
            )
            self._sem = asyncio.Semaphore(max(1, self.cfg.concurrency))
        return self._client, self._sem

    def request_body(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        adapter: str | None,
        sampling: SamplingParams | None,
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for this call."""
        params = sampling or SamplingParams(
            temperature=self.cfg.temperature, top_p=self.cfg.top_p, max_tokens=self.cfg.max_tokens
        )
        body: dict[str, Any] = {
            "model": adapter or self.model,
            "messages": to_openai_messages(messages),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        norm = normalize_tools(tools)
        if norm:
            body["tools"] = norm
            body["tool_choice"] = "auto"
        if self.logprobs:
            body["logprobs"] = True
        extra = dict(self.cfg.extra_body)
        if params.top_k > 0 and not is_official_openai(self.base_url):
            extra["top_k"] = params.top_k
        if self.return_token_ids:
            extra["return_token_ids"] = True
        if extra:
            body["extra_body"] = extra
        return body

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff_s, self.cfg.backoff_s * 2 ** (retry - 1)) * self._rng.uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay

    async def _attempt(self, body: dict[str, Any]) -> dict[str, Any]:
        client, sem = self._bind()
        async with sem:
            try:
                resp = await asyncio.wait_for(
                    client.chat.completions.create(**body, timeout=self.cfg.timeout_s), self.cfg.timeout_s
                )
            except (TimeoutError, openai.APIError) as exc:
                raise _classify(exc) from exc
        data = resp.model_dump() if hasattr(resp, "model_dump") else dict(resp)
        if not data.get("choices"):
            raise _AttemptError("http_5xx", "response has no choices")
        return data

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        """One assistant turn; raises `InfraError` when the retries are used up or on a non-retryable 4xx."""
        body = self.request_body(messages, tools, adapter, sampling)
        started = time.perf_counter()
        self.stats.requests += 1
        attempts = 0
        while True:
            attempts += 1
            self.stats.attempts += 1
            try:
                data = await self._attempt(body)
                break
            except _AttemptError as err:
                retryable = err.kind in RETRYABLE_KINDS and attempts <= self.cfg.max_retries
                if not retryable:
                    self.stats.failures += 1
                    self.stats.last_attempts = attempts
                    if err.kind == "http_4xx" and err.message.startswith(("HTTP 400", "HTTP 422")):
                        raise UserError(  # a request the server refuses as it is: retrying cannot fix it
                            f"model '{self.name}': the server refused the request ({err.message}); check the "
                            "model's config against the server (e.g. tool calling needs --enable-auto-tool-choice "
                            "and a --tool-call-parser, or use kind: vllm)"
                        ) from err
                    log.warning(
                        "model %s (%s): giving up after %d attempt(s): %s",
                        self.name,
                        body["model"],
                        attempts,
                        err.message,
                    )
                    raise InfraError(
                        err.kind, f"{err.message} (model '{body['model']}', {attempts} attempt(s))"
                    ) from err
                delay = self._backoff(attempts, err.retry_after)
                self.stats.retries += 1
                log.warning(
                    "model %s (%s): attempt %d/%d failed (%s: %s); retrying in %.2fs",
                    self.name,
                    body["model"],
                    attempts,
                    self.cfg.max_retries + 1,
                    err.kind,
                    err.message,
                    delay,
                )
                await asyncio.sleep(delay)
        self.stats.last_attempts = attempts
        choice = data["choices"][0]
        message = message_from_choice(choice, id_prefix=f"call_{len(messages)}")
        message.sampled = sampled_from_response(data, choice)
        usage = data.get("usage") or {}
        completion_ids = message.sampled.completion_ids if message.sampled else []
        return ModelResponse(
            message=message,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or len(completion_ids)),
            finish_reason=choice.get("finish_reason"),
            latency_s=time.perf_counter() - started,
            raw_text=(choice.get("message") or {}).get("content"),
        )

    async def aclose(self) -> None:
        """Close the HTTP client of the current event loop."""
        client, self._client, self._loop, self._sem = self._client, None, None, None
        if client is not None:
            with contextlib.suppress(RuntimeError):  # bound to a loop that has closed
                await client.close()
