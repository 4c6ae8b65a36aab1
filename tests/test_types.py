"""The data model round-trips through JSON and rejects what it should."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trace_rl.artifacts.manifest import RunManifest
from trace_rl.types import (
    Capability,
    ErrorRecord,
    Message,
    RewardInfo,
    SampledTokens,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
)


def full_trajectory() -> Trajectory:
    call = ToolCall(id="c1", name="get_member", arguments={"email": "a@b.org", "n": [1, 2]})
    return Trajectory(
        id="library/train/t1/0",
        env="library",
        split="train",
        task_id="t1",
        trial=0,
        seed=301,
        messages=[
            Message(role="system", content="policy"),
            Message(role="user", content="hi"),
            Message(
                role="assistant",
                tool_calls=[call],
                thought="let me look",
                sampled=SampledTokens(prompt_ids=[1, 2], completion_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3]),
            ),
            Message(role="tool", content="Error: Member not found", tool_call_id="c1", name="get_member", error=True),
        ],
        reward=0.0,
        success=False,
        reward_info=RewardInfo(reward=0.0, breakdown={"DB": 0.0, "COMMUNICATE": 1.0}),
        termination=TerminationReason.USER_STOP,
        errors=[ErrorRecord(kind="tool", message="get_member: Error: Member not found", turn=3)],
        adapter="precondition_verification",
        capability="precondition_verification",
    )


def test_trajectory_round_trip_is_exact():
    traj = full_trajectory()
    assert Trajectory.model_validate_json(traj.model_dump_json()) == traj
    assert Trajectory.model_validate(traj.model_dump(mode="json")) == traj


def test_message_never_silently_both_text_and_tool_calls():
    with pytest.raises(ValidationError, match="text or tool calls"):
        Message(role="assistant", content="hello", tool_calls=[ToolCall(id="1", name="x")])
    with pytest.raises(ValidationError, match="tool_call_id"):
        Message(role="tool", content="result")
    with pytest.raises(ValidationError, match="cannot carry tool calls"):
        Message(role="system", tool_calls=[ToolCall(id="1", name="x")])


def test_unknown_fields_are_rejected():
    with pytest.raises(ValidationError):
        Trajectory.model_validate({**full_trajectory().model_dump(mode="json"), "rewrd": 1.0})


def test_capability_name_must_be_snake_case():
    Capability(name="multi_step_completion", definition="d")
    with pytest.raises(ValidationError, match="snake_case"):
        Capability(name="Multi Step", definition="d")


def test_tau2_task_loads_with_extras_and_round_trips():
    raw = {
        "id": "0",
        "description": {"purpose": None},
        "user_scenario": {"persona": None, "instructions": {"reason_for_call": "x", "known_info": "y"}},
        "initial_state": None,
        "evaluation_criteria": {
            "actions": [{"action_id": "0_0", "name": "find", "arguments": {"a": 1}, "info": None}],
            "communicate_info": [],
            "nl_assertions": None,
            "reward_basis": ["DB", "NL_ASSERTION"],
        },
        "annotations": {"kept": True},
    }
    task = Task.model_validate(raw)
    assert task.evaluation_criteria.reward_basis[1].value == "NL_ASSERTION"
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_manifest_round_trip():
    m = RunManifest(name="r", created_at=1.5, trace_rl_version="0.1.0", packages={"torch": "2.13.0"})
    assert RunManifest.model_validate_json(m.model_dump_json()) == m
