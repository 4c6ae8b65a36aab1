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

Limits (`ServeLimits`, enforced before a backend sees the request): an API key checked on every route but `/health`
(`Authorization: Bearer <key>`, else 401 `invalid_api_key`); the body size (413, checked on `Content-Length` and again
on the bytes received); sampling fields (400 naming the field); `max_tokens` at most the base model's context and
the configured cap (400); at most `max_concurrent` generations in flight, others wait their turn (503 after
`queue_timeout_s`). Every error, an unexpected one included (500), has an OpenAI-style JSON body.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
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
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trace_rl.artifacts.router import BASE
from trace_rl.artifacts.serving import RouteLogRecord, routes_log
from trace_rl.routing.router import Router
from trace_rl.serve.backends import Backend
from trace_rl.serve.wire import WireError, chat_messages, check_sampling, error_body, first_turn

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


def _error(status: int, message: str, kind: str = "invalid_request_error", **kw: Any) -> JSONResponse:
    return JSONResponse(error_body(message, status, kind, **kw), status_code=status)


@dataclass(frozen=True)
class ServeLimits:
    """What the proxy accepts (docs/hardening.md). `api_key` None: no client authentication (loopback use)."""

    api_key: str | None = None
    max_body_bytes: int = 8 << 20
    max_tokens: int | None = None  # a cap of the proxy's own; the base model's context always caps it
    max_concurrent: int = 64
    queue_timeout_s: float = 300.0


class _TooLarge(Exception):
    pass


class Guard:
    """ASGI middleware: the API key on every route but /health, and the body size (header and bytes received)."""

    def __init__(self, app: ASGIApp, *, limits: ServeLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        key = self.limits.api_key
        if key is not None and scope.get("path") != "/health":
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
                message = "missing or wrong API key: send `Authorization: Bearer <key>`"
                await _error(401, message, code="invalid_api_key")(scope, receive, send)
                return
        limit = self.limits.max_body_bytes
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await self._too_large(scope, receive, send)
            return
        received, started = 0, False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.max_body_bytes
        await _error(413, f"request body larger than {limit} bytes")(scope, receive, send)


class Slots:
    """At most `n` generations in flight; a semaphore per event loop (an app may outlive a loop in tests)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._by_loop: dict[int, asyncio.Semaphore] = {}

    def get(self) -> asyncio.Semaphore:
        loop = id(asyncio.get_running_loop())
        if loop not in self._by_loop:
            self._by_loop = {loop: asyncio.Semaphore(self.n)}
        return self._by_loop[loop]


def _length_problem(requested: int | None, context: int | None, cap: int | None) -> str | None:
    if requested is None:
        return None
    if context is not None and requested > context:
        return f"`max_tokens` {requested} is larger than the model's context length ({context} tokens)"
    if cap is not None and requested > cap:
        return f"`max_tokens` {requested} is above this server's limit ({cap})"
    return None


def create_app(
    router: Router,
    backend: Backend,
    *,
    routed_model: str = ROUTED_MODEL,
    max_conversations: int = 100_000,
    route_log: Path | None = None,
    limits: ServeLimits | None = None,
) -> FastAPI:
    """The proxy app over `router` and `backend` (the backend is closed when the app shuts down)."""
    table = RouteTable(router, capacity=max_conversations, log_path=route_log)
    limits = limits or ServeLimits()
    own = getattr(backend, "max_concurrent", None)  # a backend's own bound (the in-process model: 1)
    slots = Slots(min(limits.max_concurrent, own) if isinstance(own, int) and own > 0 else limits.max_concurrent)

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

    # no /docs, /redoc or /openapi.json: nothing beyond the routes above faces the network
    app = FastAPI(
        title="trace-rl serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.routes = table
    app.state.backend = backend
    app.state.limits = limits
    app.add_middleware(Guard, limits=limits)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return _error(500, f"internal error ({type(exc).__name__})", "server_error")

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
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, an integer of 5,000 digits
            return _error(400, "the request body is not valid JSON")
        try:
            messages = chat_messages(body)
            requested = check_sampling(body)
            system, first_user = first_turn(messages)
            key = conversation_key(body, request.headers)
        except WireError as exc:
            return _error(exc.status, str(exc), param=exc.param)
        try:
            served = await backend.models()
        except Exception as exc:
            log.warning("backend models unavailable: %s", exc)
            return _error(502, "backend unavailable", "upstream_error")
        problem = _length_problem(requested, served.context_length, limits.max_tokens)
        if problem:
            return _error(400, problem, param="max_tokens")
        requested = str(body.get("model") or "")
        if requested != routed_model and (requested in served.names or requested == BASE):
            adapter, how = (BASE if requested in (served.base, BASE) else requested), "pinned"
        else:
            route, decided = await table.resolve(key, system, first_user, served.names)
            adapter, how = route.adapter, (route.how if decided else "cached")
        target = served.base if adapter == BASE else adapter
        slot = slots.get()
        try:
            await asyncio.wait_for(slot.acquire(), timeout=limits.queue_timeout_s)
        except TimeoutError:
            return _error(503, "too many generations in flight; retry later", "server_error")
        try:  # held while the backend generates (local) or until the upstream answers (vLLM; streams then relay)
            response = await backend.chat(body, target)
        finally:
            slot.release()
        response.headers["x-trace-adapter"] = header_safe(adapter)
        response.headers["x-trace-route"] = header_safe(how)
        response.headers["x-trace-conversation"] = header_safe(key)
        return response

    return app


__all__ = [
    "CONVERSATION_HEADER",
    "ROUTED_MODEL",
    "Guard",
    "Route",
    "RouteTable",
    "ServeLimits",
    "conversation_key",
    "create_app",
]
