"""results.json export in τ²-bench's schema, and import back to equal trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.envs.tau2.results_io import EXTRA_KEY, export_results, import_results, write_results
from trace_rl.errors import UserError
from trace_rl.types import Message, SampledTokens, ToolCall, Trajectory

from .tau2_helpers import call, domain, gold_calls, needs_data, run, say, task

pytestmark = needs_data


def episodes() -> list[Trajectory]:
    gold = run("retail", "0", [*gold_calls(task("retail", "0")), say("All set.")]).traj
    parse = Message(
        role="assistant", tool_calls=[ToolCall(id="p1", name="get_user_details", parse_error="bad", raw="{x")]
    )
    failed = run("retail", "0", [parse, call("get_order_details", order_id="#W2378156"), say("Sorry.")]).traj
    errors = run("retail", "0", [call("get_order_details", order_id="nope")] * 10).traj
    gold = gold.model_copy(update={"model": "m", "user_model": "u", "trial": 1, "seed": 7})
    gold.messages[2] = gold.messages[2].model_copy(
        update={
            "thought": "look it up",
            "sampled": SampledTokens(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5]),
        }
    )
    return [gold, failed, errors]


def test_export_is_in_tau2_shape() -> None:
    trajs = episodes()
    out = json.loads(
        json.dumps(
            export_results(
                trajs, domain("retail").tasks("base"), domain=domain("retail"), max_steps=50, max_errors=10, seed=300
            )
        )
    )
    assert set(out) == {"info", "tasks", "simulations"}
    assert out["info"]["environment_info"]["domain_name"] == "retail"
    assert len(out["info"]["environment_info"]["tool_defs"]) == 16 and out["info"]["num_trials"] == 2
    sim = out["simulations"][0]
    for key in (
        "id",
        "task_id",
        "trial",
        "seed",
        "start_time",
        "end_time",
        "duration",
        "termination_reason",
        "messages",
        "reward_info",
    ):
        assert key in sim
    assert sim["termination_reason"] == "user_stop" and sim["trial"] == 1 and sim["seed"] == 7
    first_call = next(m for m in sim["messages"] if m.get("tool_calls"))
    assert set(first_call["tool_calls"][0]) == {"id", "name", "arguments", "requestor"}
    tool_msg = next(m for m in sim["messages"] if m["role"] == "tool")
    assert tool_msg["id"] == first_call["tool_calls"][0]["id"] and tool_msg["requestor"] == "assistant"
    assert [m["turn_idx"] for m in sim["messages"]] == list(range(len(sim["messages"])))
    info = sim["reward_info"]
    assert info["reward"] == 1.0 and info["reward_basis"] == ["DB", "NL_ASSERTION"]
    assert info["reward_breakdown"] == {"DB": 1.0, "NL_ASSERTION": 1.0}
    assert info["db_check"] == {"db_match": True, "db_reward": 1.0}
    assert info["action_checks"][-1]["action"]["name"] == "exchange_delivered_order_items"
    assert info["action_checks"][-1]["tool_type"] == "write" and info["action_checks"][-1]["action_match"] is True
    assert out["simulations"][2]["termination_reason"] == "too_many_errors"
    assert out["tasks"][0]["id"] == "0" and "metadata" not in out["tasks"][0]


def test_round_trip_gives_equal_trajectories(tmp_path: Path) -> None:
    trajs = episodes()
    tasks = domain("retail").tasks("base")
    path = write_results(tmp_path / "results.json", trajs, tasks, domain=domain("retail"))
    back, back_tasks = import_results(path)
    assert back == trajs
    assert back_tasks == tasks


def test_user_tool_calls_round_trip() -> None:
    user = [call("check_notifications", requestor="user", call_id="u1"), "Please mark task_1 completed."]
    traj = run(
        "mock",
        "update_task_with_user_tools",
        [call("update_task_status", task_id="task_1", status="completed"), say("Done")],
        user,
    ).traj
    out = export_results([traj], domain("mock").tasks("base"), domain=domain("mock"))
    msgs = out["simulations"][0]["messages"]
    assert any(m["role"] == "tool" and m["requestor"] == "user" for m in msgs)
    assert any(m["role"] == "user" and m.get("tool_calls") and m["tool_calls"][0]["requestor"] == "user" for m in msgs)
    env_checks = out["simulations"][0]["reward_info"]["env_assertions"]
    assert env_checks[0]["env_assertion"]["func_name"] == "assert_notification_status" and env_checks[0]["met"] is False
    assert import_results(out)[0] == [traj]


def test_import_of_an_upstream_file_without_our_extras() -> None:
    trajs = episodes()
    out = json.loads(json.dumps(export_results(trajs, [], domain=domain("retail"))))
    for sim in out["simulations"]:
        del sim[EXTRA_KEY]
    back, tasks = import_results(out)
    assert tasks == []
    for orig, got in zip(trajs, back, strict=True):
        assert got.env == "tau2:retail" and got.task_id == orig.task_id and got.reward == orig.reward
        assert got.termination == orig.termination
        assert [(m.role, m.content if not m.thought else None) for m in got.messages] == [
            (m.role, m.content if not m.thought else None) for m in orig.messages
        ]
        assert [m.name for m in got.messages if m.role == "tool"] == [m.name for m in orig.messages if m.role == "tool"]
        assert got.reward_info.breakdown.get("DB") == orig.reward_info.breakdown.get("DB")


def test_import_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        import_results(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        import_results(tmp_path / "bad.json")
    with pytest.raises(UserError, match="simulations: missing"):
        import_results({"info": {}})
