"""Routers: pick one adapter (or the base model) for a task from its first user message (TRACE §3.5).

`Router` is the protocol the serving proxy and the evaluation use: `route(first_user_message, system) -> name`, where
name is a capability (= the adapter's served name) or "base". Implementations:

- `LabelLogitRouter` — the paper's training-free classifier: the frozen base model reads the routing prompt
  (`prompt.py`) and the label with the highest next-token logit wins. Two scorers: `LocalLogitScorer` reads the
  label tokens' logits in process (`LocalClient.next_token_logits`, the base model with adapters disabled);
  `ServerChoiceScorer` asks an OpenAI-compatible server (vLLM) for one token constrained to the labels
  (`structured_outputs: {"choice": [...]}`, temperature 0, max_tokens 1), as the released code does;
  `TokenIdChoiceScorer` does the same from token ids for a `kind: vllm` model (trace-rl's own prompt rendering).
- `FixedRouter` (always one name) and `ScriptedRouter` (by marker substrings) for tests and baselines.

Routing runs once per task; callers keep the decision for the whole episode. `decide` returns the label scores too, for
the accuracy report. `make_router` builds the label-logit router over a base model: in process when the client has
logits, else against the model's OpenAI-compatible server.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from trace_rl.artifacts.router import BASE, RouterSpec
from trace_rl.config import ModelConfig
from trace_rl.errors import InfraError, UserError
from trace_rl.models.chat_format import to_openai_messages
from trace_rl.routing.bias import apply_bias
from trace_rl.routing.prompt import routing_messages
from trace_rl.types import Message

if TYPE_CHECKING:
    from trace_rl.models.local import LocalClient

log = logging.getLogger(__name__)


@runtime_checkable
class Router(Protocol):
    """Chooses the adapter for a task: a capability name, or "base" for the unmodified model."""

    def route(self, first_user_message: str, system: str | None = None) -> str: ...


@dataclass
class RouteDecision:
    """One routing decision with its evidence."""

    name: str = field(metadata={"help": "Capability (adapter) name or 'base'."})
    label: str | None = None
    scores: dict[str, float] = field(default_factory=dict, metadata={"help": "label -> logit (or log-prob)."})
    note: str | None = None


class FixedRouter:
    """Routes every task to `name` (a baseline: all-base, or one adapter for everything)."""

    def __init__(self, name: str = BASE) -> None:
        self.name = name

    def route(self, first_user_message: str, system: str | None = None) -> str:
        return self.name


class ScriptedRouter:
    """Routes by marker: the first `marker` found in the first user message picks its name; else `default`.

    `rules` maps marker -> name (checked in order), or is a callable `(first_user_message, system) -> name`.
    Every call is recorded in `calls` (thread-safe), so tests can assert how often routing happened.
    """

    def __init__(self, rules: Mapping[str, str] | Callable[[str, str | None], str], *, default: str = BASE) -> None:
        self.rules = rules
        self.default = default
        self.calls: list[tuple[str, str | None, str]] = []
        self._lock = threading.Lock()

    def route(self, first_user_message: str, system: str | None = None) -> str:
        if callable(self.rules):
            name = self.rules(first_user_message, system)
        else:
            name = next((n for marker, n in self.rules.items() if marker in first_user_message), self.default)
        with self._lock:
            self.calls.append((first_user_message, system, name))
        return name


class LabelScorer(Protocol):
    """Scores the labels as the next token after `messages`; higher is better, -inf for impossible."""

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]: ...


class LocalLogitScorer:
    """Next-token logits of the label tokens from an in-process base model (adapters disabled)."""

    def __init__(self, client: LocalClient) -> None:
        self.client = client
        self._ids: dict[str, int] = {}

    def label_id(self, label: str) -> int:
        """The single token id of `label` at the start of an assistant turn."""
        if label not in self._ids:
            ids = self.client.tokenizer.encode(label, add_special_tokens=False)
            if len(ids) != 1:
                raise UserError(f"router label {label!r} is {len(ids)} tokens for this tokenizer; labels must be one")
            self._ids[label] = int(ids[0])
        return self._ids[label]

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        ids = [self.label_id(label) for label in labels]
        if len(set(ids)) != len(ids):
            raise UserError(f"router labels {labels} do not map to distinct tokens")
        logits = self.client.next_token_logits(messages, adapter=None)
        return {label: float(logits[i]) for label, i in zip(labels, ids, strict=True)}


class TokenIdChoiceScorer:
    """The label tokens scored by a client that samples from token ids (`VLLMClient.label_logprobs`): the prompt is
    rendered by trace-rl exactly as for the in-process router; each label gets its log-probability (log-softmax of
    the same logits: the per-task constant does not change the argmax or the meaning of per-label offsets)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.local = LocalLogitScorer(client)  # the label -> token id rule

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        ids = [self.local.label_id(label) for label in labels]
        if len(set(ids)) != len(ids):
            raise UserError(f"router labels {labels} do not map to distinct tokens")
        values = self.client.label_logprobs(messages, ids)
        return dict(zip(labels, values, strict=True))


def api_root(url: str) -> str:
    """`http://host:port` from `http://host:port`, `.../v1` or `.../v1/` (paths are added as `/v1/...`)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class ServerChoiceScorer:
    """One constrained token from an OpenAI-compatible server: the chosen label scores 0, the others their top-k
    log-probabilities when the server returns them, else -inf. `model` None: the server's base model (the entry of
    `/v1/models` without a parent), looked up once."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        client: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(base_url=api_root(base_url), timeout=timeout_s, headers=headers)
        self.model = model
        self._lock = threading.Lock()

    def base_model(self) -> str:
        with self._lock:
            if self.model is None:
                data = self._request("GET", "/v1/models")
                entries = data.get("data") or []
                roots = [e["id"] for e in entries if not e.get("parent")]
                if not roots:
                    raise InfraError("http_5xx", "the server's /v1/models lists no base model")
                self.model = roots[0]
            return self.model

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            resp = self.client.request(method, path, json=body)
        except httpx.TimeoutException as exc:
            raise InfraError("timeout", f"router request {path}: {exc}") from exc
        except httpx.TransportError as exc:
            raise InfraError("connection", f"router request {path}: {exc}") from exc
        if resp.status_code >= 400:
            kind = "http_5xx" if resp.status_code >= 500 else "http_4xx"
            raise InfraError(kind, f"router request {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def request_body(self, messages: list[Message], labels: list[str]) -> dict[str, Any]:
        return {
            "model": self.base_model(),
            "messages": to_openai_messages(messages),
            "temperature": 0.0,
            "max_tokens": 1,
            "structured_outputs": {"choice": labels},
            "logprobs": True,
            "top_logprobs": min(20, max(1, len(labels))),
        }

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        data = self._request("POST", "/v1/chat/completions", self.request_body(messages, labels))
        choice = (data.get("choices") or [{}])[0]
        text = ((choice.get("message") or {}).get("content") or "").strip()
        scores = {label: -math.inf for label in labels}
        top = ((choice.get("logprobs") or {}).get("content") or [{}])[0].get("top_logprobs") or []
        for entry in top:
            token = str(entry.get("token", "")).strip()
            if token in scores and entry.get("logprob") is not None:
                scores[token] = max(scores[token], float(entry["logprob"]))
        chosen = text if text in scores else next((label for label in labels if text.startswith(label)), None)
        if chosen is None:
            raise InfraError("http_5xx", f"router: the server answered {text!r}, not one of the labels {labels}")
        if scores[chosen] == -math.inf:
            scores[chosen] = 0.0
        others = max((v for k, v in scores.items() if k != chosen), default=-math.inf)
        if others >= scores[chosen]:  # the constrained choice decides; keep the argmax in agreement with it
            scores[chosen] = others + 1e-6
        return scores

    def close(self) -> None:
        self.client.close()


class LabelLogitRouter:
    """TRACE's router: argmax over the label tokens' next-token scores under the frozen base model, plus the spec's
    per-label offsets when it has them (`routing/bias.py`)."""

    def __init__(self, spec: RouterSpec, scorer: LabelScorer) -> None:
        self.spec = spec
        self.scorer = scorer

    @classmethod
    def local(cls, spec: RouterSpec, client: LocalClient) -> LabelLogitRouter:
        return cls(spec, LocalLogitScorer(client))

    @classmethod
    def server(cls, spec: RouterSpec, base_url: str, **kwargs: Any) -> LabelLogitRouter:
        return cls(spec, ServerChoiceScorer(base_url, **kwargs))

    def messages(self, first_user_message: str, system: str | None = None) -> list[Message]:
        return routing_messages(self.spec, first_user_message, system)

    def raw_scores(self, first_user_message: str, system: str | None = None) -> dict[str, float]:
        """The scorer's label scores, before the spec's offsets."""
        return self.scorer.scores(self.messages(first_user_message, system), self.spec.labels)

    def decide(self, first_user_message: str, system: str | None = None) -> RouteDecision:
        scores = self.raw_scores(first_user_message, system)
        if self.spec.bias:
            scores = apply_bias(scores, self.spec.bias)
        label = max(self.spec.labels, key=lambda lab: scores[lab])  # ties: the earlier label
        return RouteDecision(name=self.spec.name_of(label), label=label, scores=scores)

    def route(self, first_user_message: str, system: str | None = None) -> str:
        return self.decide(first_user_message, system).name


def make_router(spec: RouterSpec, client: Any, model_cfg: ModelConfig | None) -> Router:
    """The paper's label-logit router over the base model: in process when the client has logits, else against the
    model's OpenAI-compatible server."""
    if hasattr(client, "next_token_logits") and hasattr(client, "tokenizer"):
        return LabelLogitRouter.local(spec, client)
    if hasattr(client, "label_logprobs") and hasattr(client, "tokenizer"):
        return LabelLogitRouter(spec, TokenIdChoiceScorer(client))
    if model_cfg is not None and model_cfg.kind == "openai":
        base_url = next(iter(model_cfg.endpoints()), None)  # one routing call per task: the first server
        if not base_url:
            raise UserError("routing against a server needs the model's base_url")
        api_key = model_cfg.api_key or os.environ.get(model_cfg.api_key_env)
        return LabelLogitRouter.server(spec, base_url, model=model_cfg.model or None, api_key=api_key)
    raise UserError(
        "routing needs the base model's logits: a local model (transformers) or an OpenAI-compatible server"
    )


def router_factory(router: Router | Callable[[RouterSpec], Router]) -> Callable[[RouterSpec], Router]:
    """A factory of routers from a `RouterSpec`: `router` itself when it is one (no `route` method), else one that
    always returns the given router (the injection point of the route and evaluate stages)."""
    if hasattr(router, "route"):
        return lambda _spec, _r=router: _r  # type: ignore[misc]
    return router  # type: ignore[return-value]


def decide(router: Router, text: str, system: str | None = None) -> RouteDecision:
    """A decision with scores when the router gives them (`LabelLogitRouter.decide`), else just the name."""
    fn = getattr(router, "decide", None)
    if fn is not None:
        return fn(text, system)
    return RouteDecision(name=router.route(text, system))


__all__ = [
    "FixedRouter",
    "LabelLogitRouter",
    "LabelScorer",
    "LocalLogitScorer",
    "RouteDecision",
    "Router",
    "ScriptedRouter",
    "ServerChoiceScorer",
    "api_root",
    "decide",
    "make_router",
    "router_factory",
]
