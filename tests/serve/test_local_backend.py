"""The in-process backend (LocalClient + PEFT adapters) behind the proxy, and `build_app` / `serve_command` on a run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from trace_rl.artifacts.router import BASE, RouterSpec
from trace_rl.artifacts.store import RunDir
from trace_rl.cli.serve import serve_command
from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.base import SamplingParams
from trace_rl.routing.router import LabelLogitRouter, ScriptedRouter
from trace_rl.routing.spec import make_options
from trace_rl.serve.app import create_app
from trace_rl.serve.backends import LocalBackend
from trace_rl.serve.build import build_app
from trace_rl.types import Message

CAPS = ("verify_first", "exact_ids")


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path, tiny_adapters: dict[str, Path]) -> tuple[Path, dict[str, Path]]:
    """The session's tiny model, its two adapters named as capabilities."""
    return tiny_dir, dict(zip(CAPS, (tiny_adapters["a"], tiny_adapters["b"]), strict=True))


@pytest.fixture(scope="module")
def client(tiny: tuple[Path, dict[str, Path]]) -> Any:
    from trace_rl.models.local import LocalClient

    folder, adapters = tiny
    cfg = ModelConfig(kind="local", model=str(folder), device="cpu", adapters={k: str(v) for k, v in adapters.items()})
    return LocalClient(cfg)


async def _post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
        return await c.post("/v1/chat/completions", json=body)


def _body(text: str, **kw: Any) -> dict[str, Any]:
    return {"model": "trace", "messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": 6, **kw}


def test_local_backend_generates_with_the_routed_adapter(client: Any) -> None:
    app = create_app(ScriptedRouter({"#1": CAPS[0], "#2": CAPS[1]}), LocalBackend(client))
    greedy = SamplingParams(temperature=0, max_tokens=6)

    for text, adapter in (("order #1", CAPS[0]), ("order #2", CAPS[1]), ("order", None)):
        r = asyncio.run(_post(app, _body(text)))
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["model"] == (adapter or BASE) and data["object"] == "chat.completion"
        direct = client.generate([Message(role="user", content=text)], adapter=adapter, sampling=greedy)
        assert data["choices"][0]["message"]["content"] == direct.message.content
        assert data["usage"]["completion_tokens"] == direct.completion_tokens


def test_local_backend_streams_sse_and_lists_models(client: Any) -> None:
    app = create_app(ScriptedRouter({"#1": CAPS[0]}), LocalBackend(client))
    r = asyncio.run(_post(app, _body("order #1", stream=True, stream_options={"include_usage": True})))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.headers["content-type"].startswith("text/event-stream") and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["model"] for c in chunks} == {CAPS[0]} and chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")

    async def models() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c:
            return (await c.get("/v1/models")).json()

    listed = asyncio.run(models())["data"]
    assert [m["id"] for m in listed] == ["trace", BASE, *sorted(CAPS)]
    assert all(m.get("parent") == BASE for m in listed[2:])


def test_local_backend_rejects_what_it_cannot_do(client: Any) -> None:
    app = create_app(ScriptedRouter({}), LocalBackend(client))
    assert asyncio.run(_post(app, _body("x", n=2))).status_code == 400
    bad_tool = {"model": "trace", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]}
    assert asyncio.run(_post(app, bad_tool)).status_code == 400


def _run_with_router(tmp_path: Path, tiny: tuple[Path, dict[str, Path]]) -> Path:
    folder, adapters = tiny
    run = RunDir(tmp_path / "runs" / "r")
    spec = RouterSpec(
        base_model=str(folder),
        options=make_options([(cap, f"The {cap} skill.", adapters[cap]) for cap in CAPS]),
    )
    spec.save(run.router)
    return run.root


def test_build_app_from_a_run_routes_with_label_logits(tmp_path: Path, tiny: tuple[Path, dict[str, Path]]) -> None:
    run = _run_with_router(tmp_path, tiny)
    app = build_app(run, device="cpu")
    assert isinstance(app.state.routes.router, LabelLogitRouter)
    r = asyncio.run(_post(app, _body("Please cancel order 7")))
    assert r.status_code == 200 and r.headers["x-trace-adapter"] in (*CAPS, BASE)
    assert r.json()["model"] == r.headers["x-trace-adapter"]
    log = [json.loads(line) for line in (run / "serve" / "routes.jsonl").read_text().splitlines()]
    assert log[0]["adapter"] == r.headers["x-trace-adapter"]

    fixed = build_app(run, device="cpu", router=f"fixed:{CAPS[1]}", log_routes=False)
    assert asyncio.run(_post(fixed, _body("anything"))).json()["model"] == CAPS[1]
    with pytest.raises(UserError, match="not an option"):
        build_app(run, device="cpu", router="fixed:nope")
    with pytest.raises(UserError, match="needs --vllm-url"):
        build_app(run, router="server")
    with pytest.raises(UserError, match="trace-rl route"):
        build_app(tmp_path / "runs" / "empty")


def test_serve_command_runs_uvicorn(
    tmp_path: Path, tiny: tuple[Path, dict[str, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    run = _run_with_router(tmp_path, tiny)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))
    serve_command(run=run, port=8123, router="fixed:base", device="cpu")
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8123 and seen["app"].title == "trace-rl serve"


def test_build_app_for_vllm_and_unserved_warning(
    tmp_path: Path, tiny: tuple[Path, dict[str, Path]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import uvicorn

    from trace_rl.artifacts.router import read_router
    from trace_rl.models.vllm_server import free_port
    from trace_rl.routing.router import ServerChoiceScorer
    from trace_rl.serve.build import unserved_options

    run = _run_with_router(tmp_path, tiny)
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    app = build_app(run, vllm_url=url)
    assert app.state.backend.kind == "vllm"
    assert isinstance(app.state.routes.router.scorer, ServerChoiceScorer)
    assert unserved_options(read_router(RunDir(run)), {"tiny", CAPS[0]}) == [CAPS[1]]
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    serve_command(run=run, vllm_url=url)
    assert "cannot list the models" in capsys.readouterr().err
