"""τ² departures outside the conformance vectors, each with τ²'s behaviour as the default and a switch:
text beside tool calls scored for COMMUNICATE, argument matching as τ²'s `compare_with_tool_call`, a strict replay
that flags tampered tool outputs, and an exported results.json that τ²'s documented `Results` schema accepts."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from trace_rl.envs.evaluator import ScoringRules, action_matches, communicate_check, evaluate
from trace_rl.envs.tau2.results_io import export_results, import_results, message_from_tau2, message_to_tau2
from trace_rl.types import Action, EvaluationCriteria, Message, Task, TerminationReason, ToolCall

from .tau2_helpers import domain, gold_calls, needs_data, run, say, task


def info_task(*infos: str) -> Task:
    return Task(id="t", evaluation_criteria=EvaluationCriteria(communicate_info=list(infos)))


def beside_calls(text: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id="c1", name="lookup", arguments={})], thought=text)


# -- COMMUNICATE --------------------------------------------------------------------------------------------------
def test_text_beside_tool_calls_counts_for_communicate_as_in_tau2() -> None:
    messages = [beside_calls("Your refund of 1,234 dollars is on its way.")]
    assert communicate_check(info_task("1234"), messages)[0] == 1.0
    assert communicate_check(info_task("1234"), messages, ScoringRules(communicate_beside_calls=False))[0] == 0.0
    assert communicate_check(info_task("9999"), messages)[0] == 0.0


def test_imported_text_beside_calls_is_scored_and_exported_back_as_content() -> None:
    raw = {
        "role": "assistant",
        "content": "The code is XJ-7.",
        "tool_calls": [{"id": "a", "name": "f", "arguments": {}}],
    }
    message = message_from_tau2(raw)
    assert message.content is None and message.thought == "The code is XJ-7."  # the import side's form, unchanged
    assert communicate_check(info_task("xj-7"), [message])[0] == 1.0
    assert message_to_tau2(message, 0, {})["content"] == "The code is XJ-7."


# -- ACTION -------------------------------------------------------------------------------------------------------
def test_a_missing_argument_does_not_match_an_expected_null() -> None:
    gold = Action(name="find", arguments={"a": 1, "b": None}, compare_args=["a", "b"])
    missing = ToolCall(id="c", name="find", arguments={"a": 1})
    assert not action_matches(gold, missing)
    assert action_matches(gold, missing, tau2=False)  # the old, lenient rule
    assert action_matches(gold, ToolCall(id="c", name="find", arguments={"a": 1, "b": None}))


def test_an_extra_null_argument_is_compared_as_tau2_does() -> None:
    gold = Action(name="find", arguments={"a": 1})
    extra = ToolCall(id="c", name="find", arguments={"a": 1, "b": None})
    assert not action_matches(gold, extra)  # compare_args None: every argument of the call is compared
    assert action_matches(gold, extra, tau2=False)
    assert action_matches(gold, ToolCall(id="c", name="find", arguments={"a": 1}))
    assert not action_matches(gold, ToolCall(id="c", name="other", arguments={"a": 1}))


# -- strict replay ------------------------------------------------------------------------------------------------
def _score(env: Any, t: Task, messages: list[Message]) -> Any:
    return asyncio.run(evaluate(env, t, messages, TerminationReason.AGENT_STOP))


@needs_data
def test_strict_replay_flags_a_tampered_write_output() -> None:
    t = task("retail", "0")
    episode = run("retail", "0", [*gold_calls(t), say("All set.")])
    messages = list(episode.traj.messages)
    writes = [i for i, m in enumerate(messages) if m.role == "tool" and "exchange" in (m.name or "")]
    assert writes, "retail task 0 has a WRITE (exchange) gold action"
    clean = _score(episode.env, t, messages)
    messages[writes[0]] = messages[writes[0]].model_copy(update={"content": '{"status": "exchanged", "tampered": 1}'})
    assert _score(episode.env, t, messages).reward == clean.reward  # the default: live state, tampering unseen

    episode.env.scoring_rules = ScoringRules(strict_replay=True)  # type: ignore[attr-defined]
    flagged = _score(episode.env, t, messages)
    assert flagged.reward == 0.0
    assert [m["call_id"] for m in flagged.details["replay"]["mismatches"]] == [messages[writes[0]].tool_call_id]
    assert "strict replay" in flagged.details["gate"]
    untouched = _score(episode.env, t, list(episode.traj.messages))
    assert untouched.reward == clean.reward and untouched.details["replay"]["mismatches"] == []


@needs_data
def test_strict_replay_is_switched_on_from_the_config() -> None:
    from trace_rl.config import EnvConfig
    from trace_rl.envs.tau2 import load_domain

    from .tau2_helpers import DATA

    cfg = EnvConfig(name="tau2:mock", data_dir=DATA, scoring={"strict_replay": True})  # type: ignore[arg-type]
    assert load_domain("mock", cfg).make_env().scoring_rules == ScoringRules(strict_replay=True)  # type: ignore[attr-defined]
    assert domain("mock").make_env().scoring_rules == ScoringRules()  # type: ignore[attr-defined]


# -- results.json against τ²'s documented schema ------------------------------------------------------------------
class _Tau2(BaseModel):
    model_config = ConfigDict(extra="allow")


class ToolSignature(_Tau2):
    name: str
    doc: str
    params: dict[str, Any] | None = None
    returns: dict[str, Any] | None = None


class EnvironmentInfo(_Tau2):
    domain_name: str
    policy: str
    tool_defs: dict[str, ToolSignature] | None = None


class AgentInfo(_Tau2):
    implementation: str
    llm: str | None = None
    llm_args: dict[str, Any] | None = None


class Info(_Tau2):
    git_commit: str
    num_trials: int
    max_steps: int
    max_errors: int
    user_info: AgentInfo
    agent_info: AgentInfo
    environment_info: EnvironmentInfo
    seed: int | None = None


class Termination(StrEnum):
    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"
    INFRASTRUCTURE_ERROR = "infrastructure_error"


class RewardInfo(_Tau2):
    reward: float
    reward_basis: list[str] | None = None
    reward_breakdown: dict[str, float] | None = None


class SimulationRun(_Tau2):
    id: str
    task_id: str
    timestamp: str
    start_time: str
    end_time: str
    duration: float
    termination_reason: Termination
    reward_info: RewardInfo | None = None
    messages: list[dict[str, Any]]
    trial: int | None = None
    seed: int | None = None


class Results(_Tau2):
    info: Info
    tasks: list[dict[str, Any]]
    simulations: list[SimulationRun]


@needs_data
def test_exported_results_load_with_tau2s_results_schema() -> None:
    t = task("retail", "0")
    beside = beside_calls("Looking up your order now.")
    beside.tool_calls[0].name = "get_order_details"  # type: ignore[index]
    traj = run("retail", "0", [beside, *gold_calls(t), say("All set.")]).traj
    out = json.loads(json.dumps(export_results([traj], domain("retail").tasks("base"), domain=domain("retail"))))
    results = Results.model_validate(out)
    assert (results.info.max_steps, results.info.max_errors) == (50, 10)
    defs = results.info.environment_info.tool_defs or {}
    assert defs["get_order_details"].name == "get_order_details" and defs["get_order_details"].doc
    assert "function" not in out["info"]["environment_info"]["tool_defs"]["get_order_details"]
    exported = out["simulations"][0]["messages"]
    assert any(m.get("content") == "Looking up your order now." and m.get("tool_calls") for m in exported)
    back = import_results(out)[0][0]
    assert back.messages == traj.messages  # the round trip still gives equal trajectories
