"""The model-kind registry: one factory for every kind, and a command's clients built once, on first use."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trace_rl.config import ModelConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.models.registry import MODEL_KINDS, build_client, build_clients
from trace_rl.models.scripted import ScriptedClient


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_config_kind_is_registered() -> None:
    assert set(MODEL_KINDS) == set(ModelConfig.model_fields["kind"].annotation.__args__)


def test_build_client_dispatch(cache: Path, tiny_dir: Path) -> None:
    from trace_rl.models.local import LocalClient
    from trace_rl.models.openai_client import OpenAIClient
    from trace_rl.models.scripted import ScriptedClient

    scripted = build_client(ModelConfig(kind="scripted", script=["hi"]), name="user")
    assert isinstance(scripted, ScriptedClient) and scripted.name == "user"
    remote = build_client(ModelConfig(kind="openai", model="m", base_url="http://127.0.0.1:9/v1"), name="p")
    assert isinstance(remote, OpenAIClient) and remote.name == "p"
    local = build_client(ModelConfig(kind="local", model=str(tiny_dir)), name="l")
    assert isinstance(local, LocalClient) and local.model_path == tiny_dir
    tiny = build_client(ModelConfig(kind="tiny"), name="t")
    assert isinstance(tiny, LocalClient) and tiny.model_path.is_relative_to(cache)
    with pytest.raises(UserError, match="needs `model`"):
        build_client(ModelConfig(kind="local"), name="l")
    with pytest.raises(UserError, match="needs `model`"):
        build_client(ModelConfig(kind="openai"), name="o")
    with pytest.raises(UserError, match="unknown kind 'grpc'"):
        build_client(ModelConfig.model_construct(kind="grpc"), name="x")


def test_clients_are_built_once_on_first_lookup_and_only_built_ones_closed() -> None:
    cfg = TraceConfig(models={"user": ModelConfig(kind="scripted", script=["hi"])})
    given = ScriptedClient(["given"], name="policy")
    clients = build_clients(cfg, ["user", "user"], given={"policy": given})
    assert clients["policy"] is given and clients.built == [clients["user"]]
    assert clients.get("other") is None and "other" not in clients
    with pytest.raises(UserError, match="unknown model 'other'"):
        clients["other"]
    closed: list[str] = []

    async def aclose() -> None:
        closed.append("user")

    clients["user"].aclose = aclose  # type: ignore[method-assign]
    asyncio.run(clients.aclose())
    assert closed == ["user"] and clients.built == [] and set(clients) == {"policy"}
