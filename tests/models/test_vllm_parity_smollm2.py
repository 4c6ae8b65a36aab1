"""SmolLM2-135M's first library turns through a managed vLLM server and in process (both bf16): the same prompt ids,
worked-example tool calls rendered as the JSON lines the prompt teaches, and the same greedy turn (at least 3 of 4:
the paths use different bf16 kernels). Slow: it converts
the model (once) and starts its own server (≈ 30–60 s)."""

from __future__ import annotations

import asyncio

import pytest

from trace_rl.config import EnvConfig, ModelConfig
from trace_rl.config.serving import VLLMServerSettings
from trace_rl.models.base import SamplingParams
from trace_rl.types import Message

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_smollm2_first_library_turns_are_the_same_on_both_paths() -> None:
    from tests.rollout.vllm_server import unavailable_reason

    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    from trace_rl.engine.prompt import domain_prompt
    from trace_rl.envs.registry import load_domain
    from trace_rl.models.local import LocalClient
    from trace_rl.models.managed_server import server_for, stop_managed_servers
    from trace_rl.models.resolve import resolve_model_path
    from trace_rl.models.vllm_client import VLLMClient

    path = resolve_model_path("smollm2-135m")
    domain = load_domain("library", EnvConfig(name="library", options={"n_train": 10, "n_test": 10}))
    prompt = domain_prompt(domain)
    assert any(m.tool_calls for m in prompt.examples)  # the worked examples hold tool calls
    server = server_for(path, VLLMServerSettings(max_model_len=4096))
    try:
        remote = VLLMClient(ModelConfig(kind="vllm", model=str(path)), name="v", model_path=path, server=server)
        local = LocalClient(ModelConfig(kind="local", model=str(path), dtype="bfloat16"), name="l", model_path=path)
        text = remote.format.render_prompt(prompt.messages([]), None)
        assert '{"name": "search_catalog"' in text  # a worked-example call, not an empty assistant turn
        greedy = SamplingParams(temperature=0.0, max_tokens=48)
        agree = 0
        for task in domain.tasks("test")[:4]:
            greeting = Message(role="assistant", content="Hi! How can I help you today?")
            first = asyncio.run(domain.scripted_user(task).reply([greeting]))  # the member's first message
            history = [greeting, first]
            a = asyncio.run(remote.chat(prompt.messages(history), None, sampling=greedy)).message.sampled
            b = asyncio.run(local.chat(prompt.messages(history), None, sampling=greedy)).message.sampled
            assert a is not None and b is not None and a.prompt_ids == b.prompt_ids
            agree += a.completion_ids == b.completion_ids
        # the two paths use different bf16 kernels, so a greedy token can differ (not investigated further); measured
        # on this machine: 3 of the 4 first turns identical token for token, the prompts identical on all 4
        assert agree >= 3
    finally:
        stop_managed_servers()
