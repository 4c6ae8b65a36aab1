"""`EndpointPool`: one model served by several OpenAI-compatible endpoints, load-balanced, each episode sticky to one.

Inside an episode (`episode_scope()`, which the rollout engine opens around every episode) the first call to a pool
picks the endpoint with the fewest episodes on it right now (ties round-robin from a per-process offset, so Ray
workers do not all start on the first endpoint); every later call of that episode goes to the same endpoint, which
keeps the server's prefix cache warm and a multi-turn conversation on one server. The scope is a context variable, so
it also holds for a pool used through a wrapper (the evaluation's `RoutedClient`), for the user simulator and the
judge; leaving the scope releases the endpoints. A call outside any scope is pinned by a hash of the conversation's
system prompt and first user message (stable across the turns of a conversation).
"""

from __future__ import annotations

import contextvars
import hashlib
import itertools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trace_rl.messages import first_user_text, system_text
from trace_rl.models.base import ModelClient, ModelResponse, SamplingParams
from trace_rl.types import Message

_SCOPE: contextvars.ContextVar[dict[int, tuple[EndpointPool, int]] | None] = contextvars.ContextVar(
    "trace_rl_episode_endpoints", default=None
)


@contextmanager
def episode_scope() -> Iterator[None]:
    """One episode: every pool used inside keeps one endpoint for it; released on exit."""
    leases: dict[int, tuple[EndpointPool, int]] = {}
    token = _SCOPE.set(leases)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        for pool, index in leases.values():
            pool.release(index)


def conversation_key(messages: list[Message]) -> str:
    """System prompt + first user message (`trace_rl.messages`): the same on every turn of one episode."""
    return f"{system_text(messages) or ''}\x00{first_user_text(messages) or ''}"


class EndpointPool:
    """A `ModelClient` over several endpoint clients of the same model."""

    def __init__(self, clients: list[ModelClient], *, name: str | None = None, offset: int | None = None) -> None:
        """`offset`: where the round-robin starts (default: from the process id, so workers start apart)."""
        if not clients:
            raise ValueError("an endpoint pool needs at least one client")
        self.clients = list(clients)
        self.name = name or clients[0].name
        self.leased = [0] * len(clients)
        self.episodes = [0] * len(clients)
        self._order = itertools.count(os.getpid() if offset is None else offset)
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        """Shipped to a worker as its endpoint clients (counters and lock start afresh there)."""
        return (EndpointPool, (self.clients,), {"name": self.name})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]

    def __len__(self) -> int:
        return len(self.clients)

    def pick(self) -> int:
        """The endpoint with the fewest leased episodes; round-robin among the tied ones."""
        with self._lock:
            start = next(self._order) % len(self.clients)
            order = [(start + i) % len(self.clients) for i in range(len(self.clients))]
            best = min(order, key=lambda i: self.leased[i])
            self.leased[best] += 1
            self.episodes[best] += 1
            return best

    def release(self, index: int) -> None:
        with self._lock:
            self.leased[index] -= 1

    def client_for(self, messages: list[Message]) -> ModelClient:
        """The episode's endpoint (picked on its first call); outside an episode, the conversation's by hash."""
        leases = _SCOPE.get()
        if leases is not None:
            if id(self) not in leases:
                leases[id(self)] = (self, self.pick())
            return self.clients[leases[id(self)][1]]
        digest = hashlib.sha1(conversation_key(messages).encode()).digest()
        return self.clients[int.from_bytes(digest[:4], "big") % len(self.clients)]

    async def chat(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        adapter: str | None = None,
        sampling: SamplingParams | None = None,
    ) -> ModelResponse:
        return await self.client_for(messages).chat(messages, tools, adapter=adapter, sampling=sampling)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    def __getattr__(self, name: str) -> Any:
        """Anything else (e.g. `stats`, `base_url`) is the first endpoint's."""
        if name == "clients":
            raise AttributeError(name)
        return getattr(self.clients[0], name)
