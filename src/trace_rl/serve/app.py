"""The routing proxy: an OpenAI-compatible app that routes each conversation once and forwards it to a backend.

    POST /v1/chat/completions   route (once per conversation), then forward; streaming passes through (SSE)
    GET  /v1/models             the routed model (`trace`), the base model and every adapter
    GET  /health                the proxy and its backend
    GET  /v1/trace/routes       routing counts per adapter, conversations remembered

A conversation is identified by the `X-Conversation-Id` header, else the request's `user` field, else a hash of its
system prompt and first user message (so each turn of a multi-turn chat, which repeats that prefix, finds the same
key). The router sees the first user message (and the system prompt) once; later turns reuse its decision, so a
conversation keeps one adapter for its whole life (TRACE §3.5). Concurrent first requests of one conversation share
one routing call.

A request whose `model` names a served model (the base or an adapter) is pinned to it and not routed; any other
name (`trace`, `auto`, a client's default) is routed. A router error, or a route to an adapter the backend does not
serve, falls back to the base model and says so in the `X-Trace-Route` header; responses also carry
`X-Trace-Adapter` and `X-Trace-Conversation`. Decisions can be appended to a JSONL log (`serve/routes.jsonl`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response

from trace_rl.artifacts.router import BASE
from trace_rl.artifacts.serving import RouteLogRecord, routes_log
from trace_rl.routing.router import Router
from trace_rl.serve.backends import Backend
from trace_rl.serve.wire import WireError, chat_messages, error_body, first_turn

log = logging.getLogger(__name__)

ROUTED_MODEL = "trace"
CONVERSATION_HEADER = "x-conversation-id"


def conversation_key(body: dict[str, Any], headers: Any) -> str:
    """The conversation's key: explicit header, `user` field, else a hash of (system prompt, first user message)."""
    explicit = headers.get(CONVERSATION_HEADER)
    if explicit:
        return f"id:{explicit}"
    if isinstance(body.get("user"), str) and body["user"]:
        return f"user:{body['user']}"
    system, first = first_turn(chat_messages(body))
    digest = hashlib.sha256(json.dumps([system, first], ensure_ascii=False).encode()).hexdigest()
    return f"sha256:{digest[:32]}"


def header_safe(value: str, limit: int = 200) -> str:
    """`value` when it is short printable ASCII, else its hash (a client's `user` field may hold anything)."""
    if len(value) <= limit and value.isascii() and value.isprintable():
        return value
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:32]


@dataclass
class Route:
    """A conversation's adapter and how it was decided (`routed`, `fallback: <why>`)."""

    adapter: str
    how: str


class RouteTable:
    """conversation key -> Route, least recently used dropped beyond `capacity`; one routing call per key."""

    def __init__(self, router: Router, *, capacity: int = 100_000, log_path: Path | None = None) -> None:
        self.router = router
        self.capacity = capacity
        self.routes: OrderedDict[str, Route] = OrderedDict()
        self.pending: dict[str, asyncio.Future[Route]] = {}
        self.counts: Counter[str] = Counter()
        self.router_calls = 0
        self.log = routes_log(log_path) if log_path else None

    def get(self, key: str) -> Route | None:
        route = self.routes.get(key)
        if route is not None:
            self.routes.move_to_end(key)
        return route

    async def resolve(self, key: str, system: str | None, first_user: str, served: set[str]) -> tuple[Route, bool]:
        """(route, whether this call decided it) for the conversation `key`."""
        route = self.get(key)
        if route is not None:
            return route, False
        pending = self.pending.get(key)
        if pending is not None:
            try:
                return await asyncio.shield(pending), False
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request was cancelled
                return await self.resolve(key, system, first_user, served)  # the deciding request was
        future: asyncio.Future[Route] = asyncio.get_running_loop().create_future()
        self.pending[key] = future
        try:
            route = await self._decide(system, first_user, served)
        except BaseException:
            future.cancel()
            raise
        finally:
            self.pending.pop(key, None)
        self.routes[key] = route
        while len(self.routes) > self.capacity:
            self.routes.popitem(last=False)
        self.counts[route.adapter] += 1
        future.set_result(route)
        if self.log is not None:
            record = RouteLogRecord(conversation=key, adapter=route.adapter, how=route.how, time=time.time())
            await anyio.to_thread.run_sync(self.log.append, [record])
        return route, True

    async def _decide(self, system: str | None, first_user: str, served: set[str]) -> Route:
        self.router_calls += 1
        try:
            name = await anyio.to_thread.run_sync(self.router.route, first_user, system)
        except Exception as exc:
            log.warning("router failed (%s: %s); using the base model", type(exc).__name__, exc)
            return Route(BASE, f"fallback: router error: {type(exc).__name__}")
        if name != BASE and name not in served:
            log.warning("router chose %r, which the backend does not serve; using the base model", name)
            return Route(BASE, f"fallback: adapter {name!r} not served")
        return Route(name, "routed")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(error_body(message, status, kind), status_code=status)


def create_app(
    router: Router,
    backend: Backend,
    *,
    routed_model: str = ROUTED_MODEL,
    max_conversations: int = 100_000,
    route_log: Path | None = None,
) -> FastAPI:
    """The proxy app over `router` and `backend` (the backend is closed when the app shuts down)."""
    table = RouteTable(router, capacity=max_conversations, log_path=route_log)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await backend.models()
        except Exception as exc:  # the server may come up later; requests re-read the list
            log.warning("backend models unavailable at startup: %s", exc)
        try:
            yield
        finally:
            await backend.aclose()

    app = FastAPI(title="trace-rl serve", version="1", lifespan=lifespan)
    app.state.routes = table
    app.state.backend = backend

    @app.get("/health")
    async def health() -> JSONResponse:
        upstream = await backend.health()
        status = 200 if upstream.get("ok") else 503
        return JSONResponse({"status": "ok" if status == 200 else "degraded", "backend": upstream}, status_code=status)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        served = await backend.models(refresh=True)
        routed = {"id": routed_model, "object": "model", "created": int(time.time()), "owned_by": "trace-rl"}
        return JSONResponse({"object": "list", "data": [routed, *served.entries]})

    @app.get("/v1/trace/routes")
    async def routes() -> JSONResponse:
        return JSONResponse(
            {
                "conversations": len(table.routes),
                "router_calls": table.router_calls,
                "per_adapter": dict(table.counts),
            }
        )

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the request body is not valid JSON")
        try:
            messages = chat_messages(body)
            system, first_user = first_turn(messages)
            key = conversation_key(body, request.headers)
        except WireError as exc:
            return _error(exc.status, str(exc))
        try:
            served = await backend.models()
        except Exception as exc:
            return _error(502, f"backend unavailable: {exc}", "upstream_error")
        requested = str(body.get("model") or "")
        if requested != routed_model and (requested in served.names or requested == BASE):
            adapter, how = (BASE if requested in (served.base, BASE) else requested), "pinned"
        else:
            route, decided = await table.resolve(key, system, first_user, served.names)
            adapter, how = route.adapter, (route.how if decided else "cached")
        target = served.base if adapter == BASE else adapter
        response = await backend.chat(body, target)
        response.headers["x-trace-adapter"] = header_safe(adapter)
        response.headers["x-trace-route"] = header_safe(how)
        response.headers["x-trace-conversation"] = header_safe(key)
        return response

    return app


__all__ = ["CONVERSATION_HEADER", "ROUTED_MODEL", "Route", "RouteTable", "conversation_key", "create_app"]
