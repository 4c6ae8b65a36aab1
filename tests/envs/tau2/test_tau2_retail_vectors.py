"""Retail conformance vectors (docs/tau2-fidelity.md §8), argument-order vectors and the variant-order quirk switch."""

from __future__ import annotations

import pytest

from trace_rl.types import Action, Message, TerminationReason

from .tau2_helpers import act, actions_named, gold_calls, needs_data, run, say, task

pytestmark = needs_data
DB_ONLY = ("DB",)  # tasks with NL assertions would need a judge; these vectors are about the DB


def test_task0_all_gold_scores_one_without_judge() -> None:
    ep = run("retail", "0", [*gold_calls(task("retail", "0")), say("All set.")])
    assert ep.traj.termination == TerminationReason.USER_STOP
    assert ep.reward == 1.0
    assert ep.traj.reward_info.reward_basis == ["DB", "NL_ASSERTION"]
    assert ep.breakdown()["NL_ASSERTION"] == 1.0  # no assertions: no judge call needed


def test_task0_only_final_write_scores_one() -> None:
    (write,) = actions_named(task("retail", "0"), "exchange_delivered_order_items")
    assert run("retail", "0", [act(write), say("Done.")]).reward == 1.0


def test_task0_nothing_scores_zero() -> None:
    ep = run("retail", "0", [say("Sorry, I cannot help.")])
    assert ep.reward == 0.0 and ep.db == 0.0


def test_task0_write_with_unknown_payment_method_errors_and_scores_zero() -> None:
    (write,) = actions_named(task("retail", "0"), "exchange_delivered_order_items")
    ep = run("retail", "0", [act(write, payment_method_id="credit_card_0000000"), say("Done.")])
    assert ep.tool_results() == ["Error: Payment method not found"]
    assert ep.reward == 0.0


def _reversed(action: Action) -> Message:
    return act(action, item_ids=action.arguments["item_ids"][::-1], new_item_ids=action.arguments["new_item_ids"][::-1])


def _with_reversed(task_id: str, tool_name: str) -> list[Message]:
    actions = task("retail", task_id).evaluation_criteria.actions
    return [_reversed(a) if a.name == tool_name else act(a) for a in actions]


@pytest.mark.parametrize("task_id", ["20", "21", "36", "37"])
def test_modify_items_is_argument_order_sensitive(task_id: str) -> None:
    assert len(actions_named(task("retail", task_id), "modify_pending_order_items")) == 1
    assert run("retail", task_id, _with_reversed(task_id, "modify_pending_order_items"), basis=DB_ONLY).db == 0.0
    assert run("retail", task_id, gold_calls(task("retail", task_id)), basis=DB_ONLY).db == 1.0


@pytest.mark.parametrize("task_id", ["0", "58", "98", "99"])
def test_exchange_is_argument_order_insensitive(task_id: str) -> None:
    assert actions_named(task("retail", task_id), "exchange_delivered_order_items")
    assert run("retail", task_id, _with_reversed(task_id, "exchange_delivered_order_items"), basis=DB_ONLY).db == 1.0


FIXED = (("modify_items_last_variant", False), ("modify_items_unrounded_diff", False))


@pytest.mark.parametrize("task_id", ["20", "21", "36", "37"])
def test_turning_the_variant_quirks_off_makes_modify_order_insensitive(task_id: str) -> None:
    assert (
        run("retail", task_id, _with_reversed(task_id, "modify_pending_order_items"), quirks=FIXED, basis=DB_ONLY).db
        == 1.0
    )
    assert run("retail", task_id, gold_calls(task("retail", task_id)), quirks=FIXED, basis=DB_ONLY).db == 1.0


def test_last_variant_quirk_sets_every_item_to_the_last_variant() -> None:
    (write,) = actions_named(task("retail", "36"), "modify_pending_order_items")
    order_id = write.arguments["order_id"]
    buggy = run("retail", "36", [act(write)], basis=DB_ONLY)
    fixed = run("retail", "36", [act(write)], quirks=(("modify_items_last_variant", False),), basis=DB_ONLY)
    last = write.arguments["new_item_ids"][-1]
    buggy_items = {i.item_id: i for i in buggy.env.tools.db.orders[order_id].items}
    fixed_items = {i.item_id: i for i in fixed.env.tools.db.orders[order_id].items}
    for new_id in write.arguments["new_item_ids"]:
        assert buggy_items[new_id].price == buggy_items[last].price
        assert buggy_items[new_id].options == buggy_items[last].options
    prices = {fixed_items[n].price for n in write.arguments["new_item_ids"]}
    assert len(prices) == len(write.arguments["new_item_ids"])  # each item keeps its own variant's price


def test_zero_diff_refund_quirk() -> None:
    # a pending order with one item swapped for a same-priced variant: find one in the data
    env = run("retail", "0", []).env
    db = env.tools.db
    for order in db.orders.values():
        if order.status != "pending":
            continue
        for item in order.items:
            product = db.products[item.product_id]
            twin = next(
                (
                    v
                    for v in product.variants.values()
                    if v.item_id != item.item_id and v.available and v.price == item.price
                ),
                None,
            )
            if twin is not None:
                break
        else:
            continue
        break
    else:
        pytest.skip("no same-priced variant in the data")
    args = {
        "order_id": order.order_id,
        "item_ids": [item.item_id],
        "new_item_ids": [twin.item_id],
        "payment_method_id": order.payment_history[0].payment_method_id,
    }
    from trace_rl.types import ToolCall

    for quirk_on, expected in ((True, 1), (False, 0)):
        e = run("retail", "0", [], quirks=(("modify_items_zero_refund", quirk_on),)).env
        before = len(e.tools.db.orders[order.order_id].payment_history)
        result = e.execute(ToolCall(id="x", name="modify_pending_order_items", arguments=args))
        assert not result.error, result.content
        history = e.tools.db.orders[order.order_id].payment_history
        assert len(history) - before == expected
        if expected:
            assert history[-1].transaction_type == "refund" and history[-1].amount == 0.0
