"""OpenAIClient against a real HTTP server on 127.0.0.1: retries, errors, timeouts, tool calls, token ids, adapters,
and the concurrency limit."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trace_rl.config import ModelConfig
from trace_rl.errors import InfraError
from trace_rl.models.base import SamplingParams
from trace_rl.models.openai_client import OpenAIClient
from trace_rl.types import Message, ToolCall

Reply = tuple[int, dict[str, Any]]
Behaviour = Callable[[dict[str, Any]], Reply]
USER = [Message(role="user", content="hi")]


def completion(body: dict[str, Any], message: dict[str, Any] | None = None, **choice_extra: Any) -> Reply:
    msg = message or {"role": "assistant", "content": f"hello from {body['model']}"}
    choice = {"index": 0, "message": msg, "finish_reason": "stop", **choice_extra}
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    data = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
    return 200, {**data, "usage": usage}


def error(status: int, message: str) -> Behaviour:
    return lambda body: (status, {"error": {"message": message, "type": "Err", "code": status}})


@dataclass
class ServerState:
    queue: list[Behaviour] = field(default_factory=list)
    default: Behaviour = completion
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    state: ServerState

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        st = self.state
        with st.lock:
            st.requests.append(body)
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            behaviour = st.queue.pop(0) if st.queue else st.default
        try:
            time.sleep(st.delay_s)
            status, payload = behaviour(body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with st.lock:
                st.in_flight -= 1


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, type[Handler]]]:
    handler = type("H", (Handler,), {"state": ServerState()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def state(server: tuple[str, type[Handler]]) -> ServerState:
    server[1].state = ServerState()
    return server[1].state


def make_client(url: str, **cfg: Any) -> OpenAIClient:
    base = {"kind": "openai", "model": "base-model", "base_url": url, "backoff_s": 0.001, "timeout_s": 5.0}
    return OpenAIClient(ModelConfig(**{**base, **cfg}), name="policy", seed=0)


def chat(client: OpenAIClient, messages: list[Message] = USER, **kw: Any):
    async def go():
        try:
            return await client.chat(messages, **kw)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_retries_500_then_429_then_succeeds(server, state) -> None:
    state.queue = [error(500, "boom"), error(429, "slow down")]
    client = make_client(server[0], max_retries=3)
    r = chat(client)
    assert r.message.content == "hello from base-model"
    assert client.stats.last_attempts == 3 and client.stats.retries == 2
    assert len(state.requests) == 3
    assert (r.prompt_tokens, r.completion_tokens, r.finish_reason) == (7, 3, "stop")


def test_always_500_raises_http_5xx_after_max_retries(server, state) -> None:
    state.default = error(503, "overloaded")
    client = make_client(server[0], max_retries=2)
    with pytest.raises(InfraError) as info:
        chat(client)
    assert info.value.kind == "http_5xx" and "overloaded" in info.value.message
    assert len(state.requests) == 3 and client.stats.failures == 1


def test_rate_limit_kind_when_429_persists(server, state) -> None:
    state.default = error(429, "too many")
    with pytest.raises(InfraError) as info:
        chat(make_client(server[0], max_retries=1))
    assert info.value.kind == "rate_limit" and len(state.requests) == 2


def test_unknown_model_404_is_not_retried(server, state) -> None:
    state.default = error(404, "The model `nope` does not exist.")
    with pytest.raises(InfraError) as info:
        chat(make_client(server[0], max_retries=3), adapter="nope")
    assert info.value.kind == "http_4xx"
    assert "The model `nope` does not exist." in info.value.message
    assert len(state.requests) == 1


def test_a_400_retrying_cannot_fix_is_one_configuration_error(server, state) -> None:
    from trace_rl.errors import UserError

    state.default = error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    with pytest.raises(UserError, match=r"refused the request .*enable-auto-tool-choice"):
        chat(make_client(server[0], max_retries=3))
    assert len(state.requests) == 1


def test_context_overflow_is_its_own_kind_and_not_retried(server, state) -> None:
    state.default = error(400, "This model's maximum context length is 2048 tokens. However, you requested 4100.")
    with pytest.raises(InfraError) as info:
        chat(make_client(server[0], max_retries=3))
    assert info.value.kind == "context_length" and len(state.requests) == 1


def test_timeout(server, state) -> None:
    state.delay_s = 1.5
    client = make_client(server[0], timeout_s=0.2, max_retries=1)
    started = time.perf_counter()
    with pytest.raises(InfraError) as info:
        chat(client)
    assert info.value.kind == "timeout"
    assert client.stats.last_attempts == 2
    assert time.perf_counter() - started < 1.4


def test_connection_refused() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    client = make_client(f"http://127.0.0.1:{port}/v1", max_retries=1)
    with pytest.raises(InfraError) as info:
        chat(client)
    assert info.value.kind == "connection" and client.stats.last_attempts == 2


def test_request_shape_adapter_tools_and_wire_messages(server, state) -> None:
    client = make_client(server[0], extra_body={"top_k": 5})
    convo = [
        Message(role="user", content="weather?"),
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})]),
        Message(role="tool", tool_call_id="c1", content="sunny"),
    ]
    tools = [{"name": "get_weather", "parameters": {"type": "object"}}]
    sp = SamplingParams(temperature=0.3, top_p=0.9, max_tokens=11, seed=5, stop=["END"])
    r = chat(client, convo, tools=tools, adapter="cap_a", sampling=sp)
    assert r.message.content == "hello from cap_a"
    req = state.requests[0]
    assert req["model"] == "cap_a"
    assert (req["temperature"], req["top_p"], req["max_tokens"], req["seed"], req["stop"]) == (0.3, 0.9, 11, 5, ["END"])
    assert req["tools"] == [{"type": "function", "function": tools[0]}] and req["tool_choice"] == "auto"
    assert req["messages"][1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert req["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    assert req["top_k"] == 5 and req["return_token_ids"] is True and req["logprobs"] is True
    chat(client)
    assert state.requests[1]["model"] == "base-model" and "tools" not in state.requests[1]


def test_server_tool_calls_parsed_and_malformed_arguments_kept(server, state) -> None:
    message = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "find_user", "arguments": '{"user_id": "u_42"}'}},
            {"id": "t2", "type": "function", "function": {"name": "cancel", "arguments": '{"order": '}},
        ],
    }
    state.default = lambda body: completion(body, message)
    r = chat(make_client(server[0]))
    calls = r.message.tool_calls or []
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("t1", "find_user", {"user_id": "u_42"}),
        ("t2", "cancel", {}),
    ]
    assert calls[0].parse_error is None and calls[1].parse_error is not None and calls[1].raw == '{"order": '
    assert r.message.content is None and r.message.thought == "Let me look."


def test_tool_call_tags_in_content_are_parsed(server, state) -> None:
    text = 'ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    state.default = lambda body: completion(body, {"role": "assistant", "content": text})
    r = chat(make_client(server[0]), [*USER, Message(role="user", content="again")])
    call = (r.message.tool_calls or [])[0]
    assert (call.name, call.arguments, call.id) == ("f", {"x": 1}, "call_2_0")
    assert r.message.thought == "ok" and r.raw_text == text


def test_return_token_ids_fields(server, state) -> None:
    logprobs = {
        "content": [
            {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in [("a", -0.5), ("b", -1.0), ("", -0.1)]
        ]
    }

    def reply(body: dict[str, Any]) -> Reply:
        status, data = completion(body, token_ids=[11, 12, 2], logprobs=logprobs)
        data["prompt_token_ids"] = [1, 2, 3]
        return status, data

    state.default = reply
    sampled = chat(make_client(server[0])).message.sampled
    assert sampled is not None
    assert (sampled.prompt_ids, sampled.completion_ids, sampled.logprobs) == (
        [1, 2, 3],
        [11, 12, 2],
        [-0.5, -1.0, -0.1],
    )
    state.default = lambda body: completion(body, token_ids=[4], prompt_token_ids=[9])  # prompt ids on the choice
    sampled = chat(make_client(server[0])).message.sampled
    assert sampled is not None and (sampled.prompt_ids, sampled.completion_ids, sampled.logprobs) == ([9], [4], None)
    state.default = completion
    assert chat(make_client(server[0])).message.sampled is None


def test_no_vllm_fields_when_disabled_or_official_openai(server, state) -> None:
    chat(make_client(server[0], return_token_ids=False))
    assert "return_token_ids" not in state.requests[0] and "logprobs" not in state.requests[0]
    official = make_client("https://api.openai.com/v1")
    body = official.request_body(USER, None, None, None)
    assert "extra_body" not in body and "logprobs" not in body


def test_concurrency_limit_respected(server, state) -> None:
    state.delay_s = 0.15
    client = make_client(server[0], concurrency=2)

    async def go() -> list[Any]:
        try:
            return await asyncio.gather(*(client.chat(USER) for _ in range(6)))
        finally:
            await client.aclose()

    results = asyncio.run(go())
    assert len(results) == 6 and len(state.requests) == 6
    assert state.max_in_flight == 2


def test_client_survives_several_event_loops(server, state) -> None:
    client = make_client(server[0])
    for _ in range(3):
        assert asyncio.run(client.chat(USER)).message.content == "hello from base-model"
    assert client.stats.requests == 3
