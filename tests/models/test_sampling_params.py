"""Both sampling paths draw from the same distribution: transformers' own default top-k of 50 (what `top_k=None`
falls back to) is never applied in process; `top_k` reaches every backend as set."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from trace_rl.config import ModelConfig
from trace_rl.models.base import SamplingParams
from trace_rl.types import Message


def _captured(client: Any, monkeypatch: Any) -> list[Any]:
    seen: list[Any] = []
    original = client.model.generate

    def generate(*args: Any, generation_config: Any, **kwargs: Any) -> Any:
        seen.append(generation_config)
        return original(*args, generation_config=generation_config, **kwargs)

    monkeypatch.setattr(client.model, "generate", generate)
    return seen


def test_in_process_sampling_applies_no_hidden_top_k(tiny_dir: Path, monkeypatch: Any) -> None:
    from trace_rl.models.local import LocalClient

    client = LocalClient(ModelConfig(kind="local", model=str(tiny_dir)), name="l", model_path=tiny_dir)
    seen = _captured(client, monkeypatch)
    msgs = [Message(role="user", content="hi")]
    asyncio.run(client.chat(msgs, sampling=SamplingParams(temperature=0.7, max_tokens=2)))
    asyncio.run(client.chat(msgs, sampling=SamplingParams(temperature=0.7, top_k=5, max_tokens=2)))
    assert [g.top_k for g in seen] == [0, 5]


def test_the_training_sampler_applies_no_hidden_top_k(tiny_dir: Path, monkeypatch: Any) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_rl.engine.sampler import HFSampler

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    sampler = HFSampler(model, AutoTokenizer.from_pretrained(tiny_dir))
    seen: list[Any] = []
    original = model.generate
    monkeypatch.setattr(
        model,
        "generate",
        lambda *a, generation_config, **k: (
            seen.append(generation_config) or original(*a, generation_config=generation_config, **k)
        ),
    )
    sampler.sample([[1, 2, 3]], max_new_tokens=2, temperature=1.0)
    assert seen[0].top_k == 0


def test_top_k_reaches_the_servers(tiny_dir: Path) -> None:
    from trace_rl.models.managed_server import ExternalServer
    from trace_rl.models.openai_client import OpenAIClient
    from trace_rl.models.vllm_client import VLLMClient

    vllm = VLLMClient(
        ModelConfig(kind="vllm", model=str(tiny_dir)),
        name="v",
        model_path=tiny_dir,
        server=ExternalServer("http://127.0.0.1:9", served_name="base"),
    )
    vllm.max_model_len = 2048
    assert vllm.completion_body([1, 2], SamplingParams(), None)["top_k"] == -1
    assert vllm.completion_body([1, 2], SamplingParams(top_k=7), None)["top_k"] == 7
    openai = OpenAIClient(ModelConfig(kind="openai", model="m", base_url="http://127.0.0.1:9/v1"), name="o")
    msgs = [Message(role="user", content="hi")]
    assert openai.request_body(msgs, None, None, SamplingParams(top_k=7))["extra_body"]["top_k"] == 7
    assert "top_k" not in openai.request_body(msgs, None, None, SamplingParams()).get("extra_body", {})
