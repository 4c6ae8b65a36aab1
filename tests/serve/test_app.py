"""The routing proxy over an in-process fake vLLM: route once per conversation, keep it, pin, stream, fall back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from trace_rl.routing.router import FixedRouter, ScriptedRouter
from trace_rl.serve.app import conversation_key, create_app
from trace_rl.serve.backends import VLLMBackend
from trace_rl.types import Message

from .fake_vllm import fake_vllm

RULES = {"[A]": "a", "[B]": "b"}


def _proxy(router: Any, upstream: Any | None = None, **kw: Any) -> tuple[Any, Any]:
    upstream = upstream or fake_vllm()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream), base_url="http://vllm")
    app = create_app(router, VLLMBackend("http://vllm/v1", client=client), **kw)
    return app, upstream


async def _post(app: Any, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
        return await c.post("/v1/chat/completions", json=body, headers=headers or {})


def _chat(*texts: str, system: str | None = "be brief", model: str = "trace", **extra: Any) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, t in enumerate(texts):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
    return {"model": model, "messages": msgs, **extra}


def test_routes_by_first_message_and_keeps_the_adapter_over_turns() -> None:
    router = ScriptedRouter(RULES)
    app, upstream = _proxy(router)

    async def main() -> None:
        r1 = await _post(app, _chat("[A] cancel my order"))
        assert r1.status_code == 200 and r1.json()["model"] == "a"
        assert r1.headers["x-trace-adapter"] == "a" and r1.headers["x-trace-route"] == "routed"
        # turn 2 mentions [B] but the conversation keeps adapter a (routing used the first user message only)
        r2 = await _post(app, _chat("[A] cancel my order", "a: done?", "[B] and also this"))
        assert r2.json()["model"] == "a" and r2.headers["x-trace-route"] == "cached"
        assert r2.headers["x-trace-conversation"] == r1.headers["x-trace-conversation"]
        r3 = await _post(app, _chat("[B] where is my book"))
        assert r3.json()["model"] == "b"
        r4 = await _post(app, _chat("hello"))
        assert r4.json()["model"] == "tiny" and r4.headers["x-trace-adapter"] == "base"

    asyncio.run(main())
    assert len(router.calls) == 3  # one routing call per conversation
    assert [b["model"] for b in upstream.state.bodies] == ["a", "a", "b", "tiny"]


def test_conversation_key_sources() -> None:
    body = _chat("hi there")
    assert conversation_key(body, {"x-conversation-id": "c1"}) == "id:c1"
    assert conversation_key({**body, "user": "u7"}, {}) == "user:u7"
    k1 = conversation_key(body, {})
    assert k1.startswith("sha256:")
    assert conversation_key(_chat("hi there", "ok", "more"), {}) == k1  # later turns share the key
    assert conversation_key(_chat("hi there", system="other"), {}) != k1
    parts = {
        "model": "trace",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi there"}]},
        ],
    }
    assert conversation_key(parts, {}) == k1  # content parts flatten to the same text


def test_worked_example_turns_are_not_the_conversation_opening() -> None:
    """A few-shot client (trace-rl's own agents) sends the same example exchange before every conversation: routing
    and the key use the first user message after it, so two conversations get two routes."""
    from trace_rl.models.chat_format import to_openai_messages
    from trace_rl.serve.wire import messages_from_openai

    shots = [
        Message(role="user", content="[A] an example question", example=True),
        Message(role="assistant", content="an example answer", example=True),
    ]

    def body(opening: str) -> dict[str, Any]:
        own = [Message(role="system", content="be brief"), *shots, Message(role="user", content=opening)]
        return {"model": "trace", "messages": to_openai_messages(own)}

    b1, b2 = body("[B] where is my book"), body("hello")
    assert [m.get("name") for m in b1["messages"]] == [None, "example_user", "example_assistant", None]
    assert conversation_key(b1, {}) != conversation_key(b2, {})
    assert [m.example for m in messages_from_openai(b1["messages"])] == [False, True, True, False]
    router = ScriptedRouter(RULES)
    app, upstream = _proxy(router)

    async def main() -> None:
        r1, r2 = await _post(app, b1), await _post(app, b2)
        assert r1.headers["x-trace-adapter"] == "b" and r2.headers["x-trace-adapter"] == "base"

    asyncio.run(main())
    assert [b["model"] for b in upstream.state.bodies] == ["b", "tiny"]


def test_odd_user_fields_are_hashed_in_headers() -> None:
    app, _ = _proxy(ScriptedRouter(RULES))
    r = asyncio.run(_post(app, _chat("[A] hi", user="évelyne\nline two")))
    assert r.status_code == 200 and r.headers["x-trace-conversation"].startswith("sha256:")


def test_explicit_conversation_id_groups_different_prefixes() -> None:
    router = ScriptedRouter(RULES)
    app, _ = _proxy(router)

    async def main() -> list[str]:
        h = {"X-Conversation-Id": "session-1"}
        first = await _post(app, _chat("[A] one"), h)
        second = await _post(app, _chat("[B] a new prefix, same session"), h)
        return [first.json()["model"], second.json()["model"]]

    assert asyncio.run(main()) == ["a", "a"]
    assert len(router.calls) == 1


def test_concurrent_first_requests_share_one_routing_call() -> None:
    router = ScriptedRouter(RULES)
    app, _ = _proxy(router)

    async def main() -> list[str]:
        rs = await asyncio.gather(*[_post(app, _chat("[B] same conversation")) for _ in range(8)])
        return [r.json()["model"] for r in rs]

    assert asyncio.run(main()) == ["b"] * 8
    assert len(router.calls) == 1


def test_pinned_model_is_not_routed() -> None:
    router = ScriptedRouter(RULES)
    app, _ = _proxy(router)

    async def main() -> list[httpx.Response]:
        return [
            await _post(app, _chat("[A] x", model="b")),
            await _post(app, _chat("[A] y", model="tiny")),
            await _post(app, _chat("[A] z", model="base")),
        ]

    rs = asyncio.run(main())
    assert [r.json()["model"] for r in rs] == ["b", "tiny", "tiny"]
    assert all(r.headers["x-trace-route"] == "pinned" for r in rs)
    assert router.calls == []


def test_router_errors_and_unserved_adapters_fall_back_to_base() -> None:
    def broken(first: str, system: str | None) -> str:
        raise RuntimeError("classifier down")

    app, _ = _proxy(ScriptedRouter(broken))
    r = asyncio.run(_post(app, _chat("anything")))
    assert r.status_code == 200 and r.json()["model"] == "tiny"
    assert r.headers["x-trace-route"].startswith("fallback: router error")

    app, _ = _proxy(FixedRouter("not_served"))
    r = asyncio.run(_post(app, _chat("anything")))
    assert r.json()["model"] == "tiny" and "not served" in r.headers["x-trace-route"]


def test_streaming_passes_through() -> None:
    app, _ = _proxy(ScriptedRouter(RULES))
    r = asyncio.run(_post(app, _chat("[B] stream please", stream=True)))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["model"] for c in chunks} == {"b"}
    assert "".join(c["choices"][0]["delta"]["content"] + " " for c in chunks[1:]).strip() == "b: [B] stream please"


def test_bad_requests_and_upstream_errors() -> None:
    app, _ = _proxy(FixedRouter("base"))

    async def main() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
            return [
                await c.post("/v1/chat/completions", content=b"not json"),
                await c.post("/v1/chat/completions", json={"model": "trace", "messages": []}),
                await c.post("/v1/chat/completions", json=_chat(system="only a system prompt")),
            ]

    bad_json, empty, no_user = asyncio.run(main())
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
    assert empty.status_code == 400 and no_user.status_code == 400

    down = httpx.AsyncClient(transport=httpx.MockTransport(lambda req: (_ for _ in ()).throw(httpx.ConnectError("x"))))
    app = create_app(FixedRouter("base"), VLLMBackend("http://nowhere:1/v1", client=down))
    r = asyncio.run(_post(app, _chat("hi")))
    assert r.status_code == 502


def test_a_dropped_pooled_connection_is_resent_once() -> None:
    upstream = fake_vllm()
    asgi = httpx.ASGITransport(app=upstream)
    failures = {"left": 1}

    async def flaky(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and failures["left"]:
            failures["left"] -= 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return await asgi.handle_async_request(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(flaky), base_url="http://vllm")
    app = create_app(FixedRouter("a"), VLLMBackend("http://vllm/v1", client=client))
    r = asyncio.run(_post(app, _chat("hi")))
    assert r.status_code == 200 and r.json()["model"] == "a" and failures["left"] == 0


def test_models_health_and_route_stats() -> None:
    app, _ = _proxy(ScriptedRouter(RULES))

    async def main() -> tuple[Any, Any, Any]:
        await _post(app, _chat("[A] 1"))
        await _post(app, _chat("[A] 2"))
        await _post(app, _chat("3"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
            return (
                (await c.get("/v1/models")).json(),
                (await c.get("/health")),
                (await c.get("/v1/trace/routes")).json(),
            )

    models, health, stats = asyncio.run(main())
    assert [m["id"] for m in models["data"]] == ["trace", "tiny", "a", "b"]
    assert health.status_code == 200 and health.json()["backend"]["ok"] is True
    assert stats == {"conversations": 3, "router_calls": 3, "per_adapter": {"a": 2, "base": 1}}


def test_route_log(tmp_path: pytest.TempPathFactory) -> None:
    log = tmp_path / "serve" / "routes.jsonl"  # type: ignore[operator]
    app, _ = _proxy(ScriptedRouter(RULES), route_log=log)
    asyncio.run(_post(app, _chat("[B] logged")))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 1 and records[0]["adapter"] == "b" and records[0]["how"] == "routed"
