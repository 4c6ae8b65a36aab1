"""Conformance vectors of the mock domain (docs/tau2-fidelity.md §8), scored by the real evaluator after scripted
episodes."""

from __future__ import annotations

import asyncio

from trace_rl.engine.text_driver import Agent, EpisodeSpec, run_episode
from trace_rl.testing.playback import PlaybackClient, gold_messages, run_scripted
from trace_rl.types import TerminationReason

from .tau2_helpers import call, domain, needs_data, run, say, task

pytestmark = needs_data

CREATE = call("create_task", user_id="user_1", title="Important Meeting")


def test_create_task_gold_scores_one() -> None:
    ep = run("mock", "create_task_1", [CREATE, say("Created.")])
    assert ep.traj.termination == TerminationReason.USER_STOP
    assert ep.reward == 1.0
    assert ep.breakdown()["DB"] == 1.0 and ep.breakdown()["COMMUNICATE"] == 1.0


def test_extra_description_fails_db_and_action() -> None:
    ep = run(
        "mock", "create_task_1", [call("create_task", user_id="user_1", title="Important Meeting", description="x")]
    )
    assert ep.reward == 0.0
    assert ep.db == 0.0 and ep.breakdown()["ACTION"] == 0.0


def test_no_tool_call_scores_zero() -> None:
    assert run("mock", "create_task_1", [say("Sure.")]).reward == 0.0


def test_reads_are_ignored() -> None:
    assert run("mock", "create_task_1", [call("get_users"), CREATE, say("Done.")]).reward == 1.0


def test_impossible_task_any_transfer_summary() -> None:
    ep = run("mock", "impossible_task_1", [call("transfer_to_human_agents", summary="whatever")])
    assert ep.reward == 1.0 and ep.breakdown()["ACTION"] == 1.0


def _user_tools_episode(dismiss: bool):
    user = [call("check_notifications", requestor="user", call_id="u1"), "Please mark task_1 as completed."]
    if dismiss:
        user.append(call("dismiss_notification", requestor="user", call_id="u2", notification_id="notif_1"))
    agent = [call("update_task_status", task_id="task_1", status="completed"), say("task_1 is now completed.")]
    return run("mock", "update_task_with_user_tools", agent, user)


def test_user_tools_task_with_dismiss_fails_db() -> None:
    ep = _user_tools_episode(dismiss=True)
    assert ep.traj.termination == TerminationReason.USER_STOP
    assert any(m.role == "tool" and m.content == "Notification notif_1 dismissed" for m in ep.traj.messages)
    b = ep.breakdown()
    assert ep.reward == 0.0 and b["DB"] == 0.0 and b["ENV_ASSERTION"] == 1.0 and b["ACTION"] == 1.0
    assert ep.traj.reward_info.details["db"]["user_db_match"] is False


def test_user_tools_task_without_dismiss_fails_env_assertion() -> None:
    ep = _user_tools_episode(dismiss=False)
    b = ep.breakdown()
    assert ep.reward == 0.0 and b["ENV_ASSERTION"] == 0.0 and b["DB"] == 1.0


def test_history_and_env_assertions_scores_one_although_db_differs() -> None:
    ep = run(
        "mock",
        "update_task_with_history_and_env_assertions",
        [call("update_task_status", task_id="task_2", status="completed")],
    )
    assert ep.reward == 1.0 and ep.db == 0.0 and ep.breakdown()["ENV_ASSERTION"] == 1.0


def test_initialization_data_communicate_is_literal() -> None:
    gold = call("update_task_status", task_id="task_2", status="completed")
    generic = run("mock", "update_task_with_initialization_data", [gold, say("Done")])
    assert generic.reward == 0.0 and generic.breakdown()["COMMUNICATE"] == 0.0 and generic.db == 1.0
    info = task("mock", "update_task_with_initialization_data").evaluation_criteria.communicate_info
    verbatim = run("mock", "update_task_with_initialization_data", [gold, say(". ".join(info))])
    assert verbatim.reward == 1.0


def test_nl_eval_task_scores_one_either_way() -> None:
    assert run("mock", "create_task_1_nl_eval", [CREATE, say("Done, and you are great.")]).reward == 1.0
    assert run("mock", "create_task_1_nl_eval", [say("No.")]).reward == 1.0


def test_message_history_and_initialization_actions_create_task_2() -> None:
    for task_id in ("update_task_with_message_history", "update_task_with_initialization_actions"):
        ep = run("mock", task_id, [call("update_task_status", task_id="task_2", status="completed"), say("Done.")])
        assert ep.reward == 1.0, task_id
        assert ep.env.tools.db.tasks["task_2"].title == "Project Review"


def test_status_is_not_validated_unless_the_quirk_is_off() -> None:
    ep = run("mock", "update_task_1", [call("update_task_status", task_id="task_1", status="done")])
    assert ep.env.tools.db.tasks["task_1"].status == "done"
    strict = run(
        "mock",
        "update_task_1",
        [call("update_task_status", task_id="task_1", status="done")],
        quirks=(("unchecked_status", False),),
    )
    assert strict.tool_results()[-1] == "Error: Invalid status: done"


def test_v02_mock_has_nine_tasks_without_user_tools_task() -> None:
    ids = {t.id for t in domain("mock", "v0.2").tasks("base")}
    assert len(ids) == 9 and "update_task_with_user_tools" not in ids


def test_scripted_ticket_user_with_gold_agent() -> None:
    dom = domain("mock")
    t = task("mock", "create_task_1")
    user = dom.scripted_user(t)
    assert user is not None
    env = dom.make_env()
    agent = Agent(PlaybackClient(gold_messages(t)), dom.system_prompt(), env.tool_schemas())
    traj = asyncio.run(
        run_episode(env=env, task=t, agent=agent, user=user, spec=EpisodeSpec(env=dom.name, split="base"))
    )
    assert traj.messages[1].content == t.ticket
    assert traj.reward == 1.0 and traj.termination == TerminationReason.USER_STOP
    assert run_scripted(dom.make_env(), t, []).reward == 0.0
