"""Malformed tool calls (parse errors, wrong types, missing or extra arguments) never crash an episode."""

from __future__ import annotations

import pytest

from trace_rl.types import Message, TerminationReason, ToolCall

from .tau2_helpers import call, domain, needs_data, run, say

pytestmark = needs_data

BAD_CALLS = {
    "retail": [
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="p", name="get_order_details", parse_error="Expecting value", raw="{order")],
        ),
        call("get_order_details", order_id=12345),
        call("get_order_details", order_id=["#W2611340"]),
        call("get_order_details"),
        call("get_order_details", order_id="#W2611340", verbose=True),
        call(
            "modify_pending_order_items",
            order_id="#W9911714",
            item_ids="2366567022",
            new_item_ids=None,
            payment_method_id=7,
        ),
        call("return_delivered_order_items", order_id="#W2378156", item_ids=[None, {"a": 1}], payment_method_id="x"),
        call("calculate", expression=None),
        call("no_such_tool", x=1),
    ],
    "airline": [
        call("book_reservation", user_id="mia_li_3668"),
        call(
            "book_reservation",
            **{
                k: "x"
                for k in (
                    "user_id",
                    "origin",
                    "destination",
                    "flight_type",
                    "cabin",
                    "flights",
                    "passengers",
                    "payment_methods",
                    "total_baggages",
                    "nonfree_baggages",
                    "insurance",
                )
            },
        ),
        call(
            "book_reservation",
            user_id="mia_li_3668",
            origin="JFK",
            destination="SEA",
            flight_type="one_way",
            cabin="economy",
            flights=[{"flight_number": 136, "date": None}],
            passengers=[{"first_name": "A"}],
            payment_methods=[{"payment_id": "credit_card_4421486", "amount": "lots"}],
            total_baggages=None,
            nonfree_baggages="two",
            insurance="maybe",
        ),
        call(
            "update_reservation_baggages",
            reservation_id="YAX4DR",
            total_baggages="two",
            nonfree_baggages="three",
            payment_id="credit_card_4938634",
        ),
        call(
            "update_reservation_flights",
            reservation_id="YAX4DR",
            cabin="economy",
            flights="HAT001",
            payment_id="credit_card_4938634",
        ),
        call("update_reservation_passengers", reservation_id="YAX4DR", passengers=[1]),
        call("search_onestop_flight", origin="JFK", destination="SEA"),
        call("get_flight_status", flight_number={"n": 1}, date=[]),
        call("send_certificate", user_id="mia_li_3668", amount="fifty"),
    ],
    "mock": [
        call("create_task", user_id="user_1", title=None),
        call("create_task", title="t"),
        call("update_task_status", task_id=["task_1"], status="done"),
        call("check_notifications"),  # a user tool, called by the agent
        call("get_users", extra=1),
    ],
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_calls_are_tool_errors_and_the_episode_is_scored(name: str) -> None:
    calls = BAD_CALLS[name]
    task_id = {"retail": "0", "airline": "0", "mock": "create_task_1"}[name]
    ep = run(name, task_id, [*calls, say("Sorry about that.")])
    assert ep.traj.termination == TerminationReason.USER_STOP
    results = [m for m in ep.traj.messages if m.role == "tool"]
    assert len(results) == len(calls)
    assert all(m.error and m.content.startswith("Error: ") for m in results), [
        m.content for m in results if not m.error
    ]
    assert ep.traj.reward is not None and ep.traj.reward_info is not None
    assert any(e.kind == "parse" for e in ep.traj.errors) == (name == "retail")
    texts = {m.content for m in results}
    if name == "retail":
        assert "Error: Tool 'no_such_tool' not found." in texts
        assert any("missing 1 required positional argument: 'order_id'" in t for t in texts)
        assert any("unexpected keyword argument 'verbose'" in t for t in texts)


def test_raw_assignments_of_odd_types_still_hash() -> None:
    odd = [
        call("update_reservation_passengers", reservation_id="4WQ150", passengers=["a", "b", "c"]),
        call(
            "update_reservation_baggages",
            reservation_id="4WQ150",
            total_baggages="many",
            nonfree_baggages=0,
            payment_id="gift_card_3576581",
        ),
        call(
            "update_reservation_flights",
            reservation_id="4WQ150",
            cabin={"odd": True},
            flights=[],
            payment_id="gift_card_3576581",
        ),
    ]
    ep = run("airline", "0", [*odd, say("ok")])
    assert [m.error for m in ep.traj.messages if m.role == "tool"] == [False, False, False]
    assert ep.traj.reward == 0.0 and ep.db == 0.0


def test_too_many_errors_ends_the_episode_scored_zero() -> None:
    ep = run("retail", "0", [call("get_order_details", order_id="nope")] * 12)
    assert ep.traj.termination == TerminationReason.TOO_MANY_ERRORS
    assert ep.traj.reward == 0.0


def test_parallel_calls_in_one_turn() -> None:
    both = Message(
        role="assistant",
        tool_calls=[
            ToolCall(id="a", name="get_users", arguments={}),
            ToolCall(id="b", name="create_task", arguments={"user_id": "user_1", "title": "Important Meeting"}),
        ],
    )
    ep = run("mock", "create_task_1", [both, say("Created.")])
    assert ep.reward == 1.0


def test_envs_are_isolated() -> None:
    dom = domain("mock")
    a, b = dom.make_env(), dom.make_env()
    a.execute(ToolCall(id="1", name="create_task", arguments={"user_id": "user_1", "title": "x"}))
    assert "task_2" in a.tools.db.tasks and "task_2" not in b.tools.db.tasks
    assert a.state_hash() != b.state_hash()
