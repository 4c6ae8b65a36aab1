"""The desk's tools: results, error texts, and that they enforce integrity only, never the policy."""

from __future__ import annotations

import json

import pytest

from trace_rl.envs.library import LibraryEnvironment, make_task
from trace_rl.envs.library.tools import LibraryTools
from trace_rl.envs.toolkit import ToolType
from trace_rl.types import Task, ToolCall


def env_for(task: Task) -> LibraryEnvironment:
    env = LibraryEnvironment()
    env.reset(task)
    return env


def run(env: LibraryEnvironment, name: str, **args):
    result = env.execute(ToolCall(id="t", name=name, arguments=args))
    return result


def task_of(family: str, variant: str) -> Task:
    for seed in range(500):
        task = make_task(family, seed)
        if task.metadata["variant"].startswith(variant):
            return task
    raise AssertionError(f"no {family}/{variant} task in 500 seeds")


def gold_arg(task: Task, tool: str, arg: str):
    return next(a.arguments[arg] for a in task.evaluation_criteria.actions if a.name == tool)


def test_tool_types_and_schemas():
    kit = LibraryTools(None)
    writes = {n for n in kit.tool_names if kit.tool_type(n) == ToolType.WRITE}
    assert writes == {"check_out", "return_copy", "renew_loan", "place_hold", "cancel_hold", "pay_fine"}
    assert kit.tool_type("calculate") == kit.tool_type("transfer_to_human") == ToolType.GENERIC
    assert all(kit.mutates_state(n) == (n in writes) for n in kit.tool_names)
    schemas = {s["function"]["name"]: s["function"] for s in LibraryEnvironment().tool_schemas()}
    assert schemas["find_member_by_name"]["parameters"]["required"] == ["first_name", "last_name", "postcode"]
    assert schemas["pay_fine"]["parameters"]["properties"]["amount"]["type"] == "number"


def test_error_texts():
    task = task_of("authenticated_write", "renew")
    env = env_for(task)
    member = gold_arg(task, "get_member_details", "member_id")
    copy_id = gold_arg(task, "renew_loan", "copy_id")
    cases = [
        (("find_member_by_email", {"email": "nobody@example.org"}), "Error: Member not found"),
        (
            ("find_member_by_name", {"first_name": "No", "last_name": "Body", "postcode": "1"}),
            "Error: Member not found",
        ),
        (("get_member_details", {"member_id": "M0"}), "Error: Member M0 not found"),
        (("get_book_copies", {"book_id": "B0"}), "Error: Book B0 not found"),
        (("check_out", {"member_id": member, "copy_id": "C0"}), "Error: Copy C0 not found"),
        (("check_out", {"member_id": member, "copy_id": copy_id}), f"Error: Copy {copy_id} is already on loan"),
        (("check_out", {"member_id": "M0", "copy_id": copy_id}), "Error: Member M0 not found"),
        (("renew_loan", {"copy_id": "C0"}), "Error: Copy C0 not found"),
        (("place_hold", {"member_id": member, "book_id": "B0"}), "Error: Book B0 not found"),
        (("cancel_hold", {"member_id": member, "book_id": "B0"}), f"Error: Member {member} has no hold on B0"),
        (("pay_fine", {"member_id": member, "amount": "lots"}), "Error: Amount lots is not a number"),
        (("pay_fine", {"member_id": member, "amount": 0}), "Error: Amount must be positive"),
        (("pay_fine", {"member_id": member, "amount": 999}), "Error: Amount 999.00 exceeds fines due"),
        (("calculate", {"expression": "import os"}), "Error: Invalid characters in expression"),
        (("search_catalog", {"title": "x"}), "Error: search_catalog() got an unexpected keyword argument 'title'"),
        (("shelve_book", {}), "Error: Tool 'shelve_book' not found."),
    ]
    for (name, args), expected in cases:
        result = run(env, name, **args)
        assert result.error and result.content.startswith(expected), (name, result.content)
    on_shelf = next(c for c in env.tools.db.copies.values() if c.status == "available")
    assert run(env, "return_copy", copy_id=on_shelf.copy_id).content == f"Error: Copy {on_shelf.copy_id} is not on loan"


def test_results_are_short_records():
    task = task_of("authenticated_write", "pay_fine")
    env = env_for(task)
    email = gold_arg(task, "find_member_by_email", "email")
    member = run(env, "find_member_by_email", email=email.upper()).content  # emails match case-insensitively
    assert member == gold_arg(task, "get_member_details", "member_id")
    details = json.loads(run(env, "get_member_details", member_id=member).content)
    assert set(details) == {"member_id", "name", "email", "postcode", "card_status", "fines", "loans", "holds"}
    assert len(run(env, "get_member_details", member_id=member).content) < 800
    paid = json.loads(run(env, "pay_fine", member_id=member, amount="$1.00").content)
    assert paid["paid"] == "1.00" and float(paid["fines"]) == float(details["fines"]) - 1
    assert run(env, "calculate", expression="3 * 0.25").content == "0.75"
    assert run(env, "transfer_to_human", summary="lost card").content == "Transfer successful"


def test_return_charges_the_late_fee_and_renew_moves_the_due_date():
    task = task_of("authenticated_write", "return")
    env = env_for(task)
    result = json.loads(run(env, "return_copy", copy_id=gold_arg(task, "return_copy", "copy_id")).content)
    assert result["late_fee"] == task.evaluation_criteria.communicate_info[0]
    task = task_of("authenticated_write", "renew")
    env = env_for(task)
    renewed = json.loads(run(env, "renew_loan", copy_id=gold_arg(task, "renew_loan", "copy_id")).content)
    assert renewed["due"] == task.evaluation_criteria.communicate_info[0]


@pytest.mark.parametrize(
    "variant", ["fines", "card", "renewal_limit", "renewal_held", "hold_available", "reference_only"]
)
def test_policy_violating_writes_are_valid_tool_calls(variant: str):
    """The tools never enforce the policy: each forbidden change goes through (and would fail the DB check)."""
    task = task_of("precondition_refusal", variant)
    env = env_for(task)
    member = gold_arg(task, "get_member_details", "member_id")
    db = env.tools.db
    if variant in ("fines", "card", "reference_only"):
        book = gold_arg(task, "get_book_copies", "book_id")
        copy = next(c for c in db.book_copies(book) if c.status == "available")
        result = run(env, "check_out", member_id=member, copy_id=copy.copy_id)
    elif variant.startswith("renewal"):
        copy_id = next(
            ln.copy_id for ln in db.member_loans(member) if ln.due == task.evaluation_criteria.communicate_info[0]
        )
        result = run(env, "renew_loan", copy_id=copy_id)
    else:
        result = run(env, "place_hold", member_id=member, book_id=gold_arg(task, "get_book_copies", "book_id"))
    assert not result.error, result.content
