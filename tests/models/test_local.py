"""LocalClient on the tiny model with two LoRA adapters: adapter selection, token ids, log-probs, determinism."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trace_rl.config import ModelConfig
from trace_rl.errors import UserError
from trace_rl.models.base import ModelClient, SamplingParams
from trace_rl.models.local import LocalClient
from trace_rl.types import Message, ToolCall

USER = [Message(role="user", content="What is the weather in Paris?")]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def client(tiny_dir: Path, tiny_adapters: dict[str, Path]) -> LocalClient:
    cfg = ModelConfig(kind="local", adapters={f"cap_{k}": str(v) for k, v in tiny_adapters.items()}, device="cpu")
    return LocalClient(cfg, name="policy", model_path=tiny_dir)


def run(client: LocalClient, messages: list[Message] = USER, **kw: Any):
    return asyncio.run(client.chat(messages, **kw))


def test_is_a_model_client(client: LocalClient) -> None:
    assert isinstance(client, ModelClient)
    assert sorted(client.adapters) == ["cap_a", "cap_b"]
    assert client.dtype == torch.float32 and client.device == "cpu"


def test_adapters_change_greedy_outputs(client: LocalClient) -> None:
    ids = {
        name: run(client, adapter=name, sampling=GREEDY).message.sampled.completion_ids
        for name in (None, "cap_a", "cap_b")
    }
    assert ids[None] != ids["cap_a"] and ids[None] != ids["cap_b"] and ids["cap_a"] != ids["cap_b"]
    assert run(client, adapter=None, sampling=GREEDY).message.sampled.completion_ids == ids[None]
    assert run(client, adapter="__base__", sampling=GREEDY).message.sampled.completion_ids == ids[None]


def test_ids_text_and_logprobs_agree(client: LocalClient) -> None:
    r = run(client, adapter="cap_a", sampling=SamplingParams(temperature=1.0, max_tokens=10, seed=1))
    s = r.message.sampled
    assert s is not None and s.logprobs is not None
    assert len(s.completion_ids) == len(s.logprobs) == r.completion_tokens > 0
    assert all(lp <= 0.0 for lp in s.logprobs)
    text_ids = s.completion_ids[:-1] if s.completion_ids[-1] in client.stop_ids else s.completion_ids
    assert client.tokenizer.decode(text_ids, skip_special_tokens=False) == r.raw_text
    assert s.prompt_ids == client.prompt_ids(USER) and r.prompt_tokens == len(s.prompt_ids)
    assert client.tokenizer.decode(s.prompt_ids).endswith("<|im_start|>assistant\n")


def test_greedy_first_token_matches_next_token_logits(client: LocalClient) -> None:
    for adapter in (None, "cap_b"):
        r = run(client, adapter=adapter, sampling=GREEDY)
        logits = client.next_token_logits(USER, adapter=adapter)
        assert logits.shape == (len(client.tokenizer),)
        first = r.message.sampled.completion_ids[0]
        assert int(logits.argmax()) == first
        expected = torch.log_softmax(logits, dim=-1)[first].item()
        assert math.isclose(r.message.sampled.logprobs[0], expected, rel_tol=1e-4, abs_tol=1e-5)


def test_same_seed_same_sample_and_seed_matters(client: LocalClient) -> None:
    def sample(seed: int) -> list[int]:
        sp = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=10, seed=seed)
        return run(client, adapter="cap_b", sampling=sp).message.sampled.completion_ids

    assert sample(7) == sample(7)
    assert len({tuple(sample(s)) for s in (1, 2, 3)}) > 1


def test_concurrent_chats_are_serialised_and_correct(client: LocalClient) -> None:
    expected = [
        run(client, adapter=a, sampling=GREEDY).message.sampled.completion_ids for a in ("cap_a", None, "cap_b")
    ]

    async def go() -> list[Any]:
        return await asyncio.gather(*(client.chat(USER, adapter=a, sampling=GREEDY) for a in ("cap_a", None, "cap_b")))

    got = [r.message.sampled.completion_ids for r in asyncio.run(go())]
    assert got == expected


def test_unknown_adapter_is_a_user_error(client: LocalClient) -> None:
    with pytest.raises(UserError, match="no adapter 'zzz'"):
        run(client, adapter="zzz", sampling=GREEDY)


def test_history_with_tool_calls_and_tools_renders(client: LocalClient) -> None:
    convo = [
        *USER,
        Message(role="assistant", tool_calls=[ToolCall(id="c0", name="get_weather", arguments={"city": "Paris"})]),
        Message(role="tool", tool_call_id="c0", content="sunny, 21C"),
    ]
    prompt = client.render_prompt(convo, [{"name": "get_weather", "parameters": {"type": "object"}}])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "sunny, 21C" in prompt and '"name": "get_weather"' in prompt.split("<|im_end|>")[0]
    assert run(client, convo, sampling=GREEDY).prompt_tokens == len(client.prompt_ids(convo))


def test_generated_tool_call_is_parsed(client: LocalClient, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = client.tokenizer
    text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    scripted = [*tok(text, add_special_tokens=False)["input_ids"], tok.eos_token_id]

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> SimpleNamespace:
        seq = torch.cat([input_ids, torch.tensor([scripted])], dim=1)
        return SimpleNamespace(sequences=seq, logits=tuple(torch.zeros(1, len(tok)) for _ in scripted))

    monkeypatch.setattr(client.model, "generate", fake_generate)
    r = run(client, [*USER, Message(role="user", content="please")], sampling=GREEDY)
    call = (r.message.tool_calls or [])[0]
    assert (call.id, call.name, call.arguments) == ("call_2_0", "get_weather", {"city": "Paris"})
    assert r.message.thought == "Checking." and r.finish_reason == "tool_calls"
    assert r.message.sampled.completion_ids == scripted
    assert r.message.sampled.logprobs[0] == pytest.approx(-math.log(len(tok)))


def test_length_finish_and_runtime_adapter_reload(tiny_dir: Path, tiny_adapters: dict[str, Path]) -> None:
    local = LocalClient(ModelConfig(kind="local", adapters={"cap_a": str(tiny_adapters["a"])}), model_path=tiny_dir)
    r = run(local, sampling=SamplingParams(temperature=0.0, max_tokens=3))
    ids = r.message.sampled.completion_ids
    assert 0 < len(ids) <= 3
    assert r.finish_reason == ("stop" if ids[-1] in local.stop_ids else "length")
    with pytest.raises(UserError, match="not a PEFT adapter folder"):
        local.load_adapter("x", tiny_dir)
    with pytest.raises(UserError, match="prefix 'lora_'"):
        local.load_adapter("ra", tiny_adapters["a"])
    before = run(local, adapter="cap_a", sampling=GREEDY).message.sampled.completion_ids
    local.load_adapter("cap_a", tiny_adapters["b"])  # replace the weights of a loaded adapter (after training)
    after = run(local, adapter="cap_a", sampling=GREEDY).message.sampled.completion_ids
    assert after != before
    local.load_adapter("cap_b", tiny_adapters["b"])
    assert run(local, adapter="cap_b", sampling=GREEDY).message.sampled.completion_ids == after


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_bf16_path(tiny_dir: Path, tiny_adapters: dict[str, Path]) -> None:
    adapters = {f"cap_{k}": str(v) for k, v in tiny_adapters.items()}
    gpu = LocalClient(ModelConfig(kind="local", adapters=adapters), model_path=tiny_dir)  # device, dtype: auto
    assert gpu.device == "cuda" and gpu.dtype == torch.bfloat16
    assert next(gpu.model.parameters()).device.type == "cuda"
    ids = {a: run(gpu, adapter=a, sampling=GREEDY).message.sampled.completion_ids for a in (None, "cap_a", "cap_b")}
    assert len({tuple(v) for v in ids.values()}) == 3
    logits = gpu.next_token_logits(USER, adapter="cap_a")
    assert logits.device.type == "cpu" and logits.dtype == torch.float32
    assert int(logits.argmax()) == ids["cap_a"][0]
    sp = SamplingParams(temperature=1.0, max_tokens=10, seed=3)
    first, second = run(gpu, adapter="cap_b", sampling=sp), run(gpu, adapter="cap_b", sampling=sp)
    assert first.message.sampled.completion_ids == second.message.sampled.completion_ids
    assert len(first.message.sampled.logprobs) == len(first.message.sampled.completion_ids)
    cpu_rng = torch.get_rng_state()
    run(gpu, sampling=sp)
    assert torch.equal(torch.get_rng_state(), cpu_rng)  # seeding does not disturb the caller's generator
