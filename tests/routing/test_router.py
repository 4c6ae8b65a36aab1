"""Routers: the routing prompt, router.json, label-logit routing (in process on the tiny model, and against a
server's constrained choice), and the fixed / scripted routers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.artifacts.builders import write_capabilities_file

from trace_rl.artifacts.router import BASE, RouterSpec, read_router
from trace_rl.artifacts.store import RunDir
from trace_rl.errors import InfraError, UserError
from trace_rl.routing.prompt import condense_trajectory, routing_messages
from trace_rl.routing.router import (
    FixedRouter,
    LabelLogitRouter,
    LocalLogitScorer,
    Router,
    ScriptedRouter,
    ServerChoiceScorer,
    api_root,
)
from trace_rl.routing.spec import make_options, spec_from_run
from trace_rl.types import Message, ToolCall, Trajectory


def _spec(**kw: Any) -> RouterSpec:
    options = make_options(
        [
            ("verify_before_act", "Look the record up before changing it.", Path("/x/a")),
            ("exact_arguments", "Call tools with the exact identifiers the user gave.", Path("/x/b")),
        ],
        {"verify_before_act": ("env/test/1/0", 'Customer: cancel #1 [Agent calls get_order(id="#1")] Agent: done')},
    )
    return RouterSpec(base_model="tiny", options=options, **kw)


def test_options_labels_and_base_last() -> None:
    spec = _spec()
    assert spec.labels == ["A", "B", "C"] and spec.names == ["verify_before_act", "exact_arguments", BASE]
    assert spec.adapters == {"verify_before_act": Path("/x/a"), "exact_arguments": Path("/x/b")}
    assert spec.name_of("C") == BASE
    with pytest.raises(UserError):
        make_options([(BASE, "reserved", None)])
    with pytest.raises(ValueError):
        RouterSpec(base_model="m", options=[*spec.options, spec.options[0]])


def test_routing_prompt_follows_the_paper() -> None:
    msgs = routing_messages(_spec(), "Please cancel order #1", system="You are a retail agent.")
    assert [m.role for m in msgs] == ["system", "user", "user"]
    system = msgs[0].text
    assert system.startswith("You are a routing classifier.") and system.endswith("Only output the label.")
    assert "A: verify_before_act — Look the record up" in system
    assert "   Similar scenario: Customer: cancel #1" in system
    assert "C: general — No specialised skill is needed" in system
    assert msgs[1].text == "Please cancel order #1"  # the agent's system prompt is not shown by default
    assert msgs[2].text == "Which skill? Answer with one label: A, B, C."
    shown = routing_messages(_spec(prompt={"include_system": True}), "hi", system="You are a retail agent.")
    assert shown[1].text.startswith("(Agent instructions, excerpt: You are a retail agent.)")


def test_condense_trajectory() -> None:
    msgs = [
        Message(role="system", content="policy"),
        Message(role="user", content="I want to return   my book"),
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="find_user", arguments={"email": "a@b.org"})]),
        Message(role="tool", content="Error: no such user", tool_call_id="c1", name="find_user", error=True),
        Message(role="assistant", content="Could you confirm your email?"),
    ]
    text = condense_trajectory(msgs)
    assert text == (
        'Customer: I want to return my book [Agent calls find_user(email="a@b.org")] '
        "[Tool error from find_user] Agent: Could you confirm your email?"
    )
    assert len(condense_trajectory(msgs, max_chars=30)) == 30


def test_router_json_round_trip_and_spec_from_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "runs" / "r")
    for cap in ("exact_arguments", "verify_before_act", "multi"):
        (run.root / "adapters" / cap).mkdir(parents=True)
        (run.root / "adapters" / cap / "adapter_config.json").write_text("{}")
    write_capabilities_file(
        run,
        selected=[{"name": "verify_before_act", "definition": "Verify the record before acting on it."}],
        candidates=[{"name": "exact_arguments", "definition": "Use exact identifiers."}],
    )
    ok = Trajectory(
        id="verify_before_act/held_out/s1/0",
        env="verify_before_act",
        split="held_out",
        task_id="s1",
        trial=0,
        seed=1,
        success=True,
        reward=1.0,
        messages=[Message(role="user", content="cancel order #9")],
    )
    failed = ok.model_copy(update={"id": "x/0", "success": False})
    (run.root / "train" / "verify_before_act").mkdir(parents=True)
    (run.root / "train" / "verify_before_act" / "eval_after.jsonl").write_text(
        failed.model_dump_json() + "\n" + ok.model_dump_json() + "\n"
    )
    spec = spec_from_run(run, base_model="tiny")
    assert spec.names == ["exact_arguments", "verify_before_act", BASE]  # `multi` is a baseline, not an option
    assert spec.options[1].description == "Verify the record before acting on it."
    assert spec.options[1].example == "Customer: cancel order #9" and spec.options[1].example_id == ok.id
    assert spec.options[0].example is None
    spec.save(run.router)
    assert read_router(run) == spec
    with pytest.raises(UserError, match="no trained adapter"):
        spec_from_run(run, base_model="tiny", capabilities=["nope"])
    with pytest.raises(UserError, match="trace-rl route"):
        read_router(RunDir(tmp_path / "empty"))


class _Scorer:
    def __init__(self, scores: dict[str, float]) -> None:
        self.scores_ = scores
        self.seen: list[list[Message]] = []

    def scores(self, messages: list[Message], labels: list[str]) -> dict[str, float]:
        self.seen.append(messages)
        return {label: self.scores_[label] for label in labels}


def test_label_logit_router_takes_the_argmax() -> None:
    scorer = _Scorer({"A": 0.1, "B": 2.0, "C": 1.0})
    router = LabelLogitRouter(_spec(), scorer)
    decision = router.decide("fix the order", "sys")
    assert decision.name == "exact_arguments" and decision.label == "B" and decision.scores["C"] == 1.0
    assert router.route("x") == "exact_arguments"
    assert scorer.seen[0][1].text == "fix the order"
    assert LabelLogitRouter(_spec(), _Scorer({"A": 1.0, "B": 1.0, "C": 1.0})).route("x") == "verify_before_act"


def test_fixed_and_scripted_routers() -> None:
    assert isinstance(FixedRouter("a"), Router) and FixedRouter("a").route("anything") == "a"
    scripted = ScriptedRouter({"#A": "a", "#B": "b"})
    assert [scripted.route(t) for t in ("x #B", "#A and #B", "none")] == ["b", "a", BASE]
    assert len(scripted.calls) == 3
    assert ScriptedRouter(lambda first, system: system or "none").route("x", "sys") == "sys"


@pytest.fixture(scope="module")
def tiny_client(tiny_dir: Path, tiny_adapters: dict[str, Path]) -> Any:
    from trace_rl.config import ModelConfig
    from trace_rl.models.local import LocalClient

    adapters = {"alpha": str(tiny_adapters["a"])}
    return LocalClient(ModelConfig(kind="local", model=str(tiny_dir), device="cpu", adapters=adapters))


def test_local_label_logits_on_the_tiny_model(tiny_client: Any) -> None:
    spec = _spec()
    router = LabelLogitRouter.local(spec, tiny_client)
    decision = router.decide("Please cancel order #1", "You are an agent.")
    logits = tiny_client.next_token_logits(router.messages("Please cancel order #1", "You are an agent."))
    ids = [tiny_client.tokenizer.encode(label, add_special_tokens=False)[0] for label in spec.labels]
    expected = spec.labels[max(range(3), key=lambda i: float(logits[ids[i]]))]
    assert decision.label == expected and decision.name == spec.name_of(expected)
    assert decision.scores == pytest.approx({lab: float(logits[i]) for lab, i in zip(spec.labels, ids, strict=True)})
    # the classifier is the frozen base model: a loaded adapter does not change the decision's scores
    again = router.decide("Please cancel order #1", "You are an agent.")
    assert again.scores == decision.scores


def test_multi_token_labels_are_refused(tiny_client: Any) -> None:
    scorer = LocalLogitScorer(tiny_client)
    with pytest.raises(UserError, match="tokens"):
        scorer.label_id("verify_before_act_label")


def _server(handler: Any) -> ServerChoiceScorer:
    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://vllm")
    return ServerChoiceScorer("http://vllm/v1", client=client)


def test_server_choice_scorer_request_and_answer() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "a", "parent": "tiny"}, {"id": "tiny", "parent": None}]})
        bodies.append(json.loads(request.content))
        top = [{"token": "C", "logprob": -0.2}, {"token": "A", "logprob": -1.9}]
        choice = {"message": {"content": "C"}, "logprobs": {"content": [{"token": "C", "top_logprobs": top}]}}
        return httpx.Response(200, json={"choices": [choice]})

    router = LabelLogitRouter(_spec(), _server(handler))
    decision = router.decide("hello")
    assert decision.name == BASE and decision.scores["A"] == -1.9 and decision.scores["B"] == -math.inf
    body = bodies[0]
    assert body["model"] == "tiny" and body["temperature"] == 0.0 and body["max_tokens"] == 1
    assert body["structured_outputs"] == {"choice": ["A", "B", "C"]}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "user"]


def test_server_choice_without_logprobs_and_bad_answers() -> None:
    answer = {"content": "B"}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        return httpx.Response(200, json={"choices": [{"message": answer}]})

    router = LabelLogitRouter(_spec(), _server(handler))
    assert router.route("hello") == "exact_arguments"
    answer["content"] = "Z"
    with pytest.raises(InfraError, match="not one of the labels"):
        router.route("hello")
    down = _server(lambda request: httpx.Response(503, text="busy"))
    down.model = "tiny"
    with pytest.raises(InfraError, match="503"):
        down.scores([Message(role="user", content="x")], ["A"])


def test_api_root() -> None:
    assert api_root("http://h:1/v1/") == api_root("http://h:1/v1") == api_root("http://h:1") == "http://h:1"
