"""Airline conformance vectors V1–V10 and further variants, through scripted episodes (docs/tau2-fidelity.md §8)."""

from __future__ import annotations

import itertools

import pytest

from .tau2_helpers import act, actions_named, call, gold_calls, needs_data, run, say, task

pytestmark = needs_data
BOTH = ["head", "v0.2"]


def gold(task_id: str, task_set: str = "head"):
    return task("airline", task_id, task_set).evaluation_criteria.actions


@pytest.mark.parametrize("ts", BOTH)
def test_v1_reads_and_refusal_match(ts: str) -> None:
    reads = [
        call("get_user_details", user_id="emma_kim_9957"),
        call("get_reservation_details", reservation_id="EHGLP3"),
    ]
    ep = run("airline", "0", [*reads, say("I am sorry, this reservation cannot be cancelled.")], task_set=ts)
    assert ep.db == 1.0 and ep.reward == 1.0


@pytest.mark.parametrize("ts", BOTH)
def test_v2_cancel_mismatches(ts: str) -> None:
    ep = run("airline", "0", [call("cancel_reservation", reservation_id="EHGLP3")], task_set=ts)
    assert ep.db == 0.0
    res = ep.env.tools.db.reservations["EHGLP3"]
    assert res.status == "cancelled"
    assert [p.model_dump() for p in res.payment_history] == [
        {"payment_id": "credit_card_5832574", "amount": 208},
        {"payment_id": "credit_card_5832574", "amount": -208},
    ]


@pytest.mark.parametrize("ts", BOTH)
def test_v3_failed_call_leaves_no_trace(ts: str) -> None:
    agent = [call("cancel_reservation", reservation_id="Z7G0ZK"), call("cancel_reservation", reservation_id="Z7GOZK")]
    ep = run("airline", "19", agent, task_set=ts)
    assert ep.tool_results()[0] == "Error: Reservation Z7G0ZK not found"
    assert ep.db == 1.0
    db = ep.env.tools.db
    card = db.users[db.reservations["Z7GOZK"].user_id].payment_methods["gift_card_2200803"]
    assert card.amount == 123.0 and isinstance(card.amount, float)


def test_v4_double_cancel_mismatches_unless_quirk_off() -> None:
    twice = [call("cancel_reservation", reservation_id="Z7GOZK")] * 2
    ep = run("airline", "19", twice)
    assert ep.db == 0.0
    assert [p.amount for p in ep.env.tools.db.reservations["Z7GOZK"].payment_history] == [169, -169, -169, 169]
    strict = run("airline", "19", twice, quirks=(("cancel_repeatable", False),))
    assert strict.tool_results()[-1] == "Error: Reservation Z7GOZK is already cancelled"
    assert strict.db == 1.0


@pytest.mark.parametrize("ts", BOTH)
def test_v5_certificate_refused_even_at_price_zero(ts: str) -> None:
    *reads, bags = gold("12", ts)
    assert bags.name == "update_reservation_baggages"
    agent = [*map(act, reads), act(bags, payment_id="certificate_6730850"), act(bags)]
    ep = run("airline", "12", agent, task_set=ts)
    assert "Error: Certificate cannot be used to update reservation" in ep.tool_results()
    assert ep.tool_results()[3] == "1200.0"  # calculate("2 * ((350 - 122) + (499 - 127))")
    assert ep.db == 1.0
    paid = run("airline", "12", [*map(act, reads), act(bags, nonfree_baggages=1)], task_set=ts)
    assert paid.db == 0.0
    assert paid.env.tools.db.reservations["YAX4DR"].payment_history[-1].model_dump() == {
        "payment_id": "credit_card_4938634",
        "amount": 50,
    }


@pytest.mark.parametrize("ts", BOTH)
def test_v6_failed_booking_consumes_no_id(ts: str) -> None:
    (book,) = gold("20", ts)
    bad = [{"payment_id": "certificate_7504069", "amount": 250}, {"payment_id": "certificate_4856383", "amount": 100}]
    ep = run("airline", "20", [act(book, payment_methods=bad), act(book)], task_set=ts)
    assert ep.tool_results()[0] == "Error: Payment amount does not add up, total price is 255, but paid 350"
    assert ep.db == 1.0
    db = ep.env.tools.db
    res = db.reservations["HATHAT"]
    assert res.created_at == "2024-05-15T15:00:00" and res.cabin == "economy"
    assert [(f.flight_number, f.price) for f in res.flights] == [("HAT136", 152), ("HAT039", 103)]
    assert "certificate_7504069" not in db.users["mia_li_3668"].payment_methods
    assert db.users["mia_li_3668"].reservations[-1] == "HATHAT"
    assert db.flights["HAT136"].dates["2024-05-20"].available_seats["economy"] == 13
    assert db.flights["HAT039"].dates["2024-05-20"].available_seats["economy"] == 9
    floats = [
        {"payment_id": "certificate_7504069", "amount": 250.0},
        {"payment_id": "credit_card_4421486", "amount": 5.0},
    ]
    coerced = run("airline", "20", [act(book, payment_methods=floats)], task_set=ts)
    assert coerced.db == 1.0
    assert coerced.env.tools.db.reservations["HATHAT"].payment_history[0].amount == 250


@pytest.mark.parametrize("ts", BOTH)
def test_v7_flight_order_matters(ts: str) -> None:
    (book,) = gold("20", ts)
    assert run("airline", "20", [act(book, flights=book.arguments["flights"][::-1])], task_set=ts).db == 0.0


def test_v8_booking_order_decides_reservation_ids() -> None:
    cancel, first, raj, liam = gold("23")
    assert run("airline", "23", [act(cancel), act(first), act(liam), act(raj)]).db == 0.0
    in_order = run("airline", "23", [act(first), act(raj), act(liam), act(cancel)])
    assert in_order.db == 1.0
    res = in_order.env.tools.db.reservations
    assert res["HATHAU"].passengers[0].first_name == "Raj" and res["HATHAV"].passengers[0].first_name == "Liam"


def test_v9_task7_cabin_differs_between_versions() -> None:
    v02 = [act(a) for a in gold("7", "v0.2")]
    head = run("airline", "7", v02, task_set="head")
    assert head.db == 0.0
    assert run("airline", "7", v02, task_set="v0.2").db == 1.0
    economy = head.env.tools.db.reservations["XEHM4B"].payment_history
    assert {"payment_id": "credit_card_2408938", "amount": 288} in [p.model_dump() for p in economy]
    business = run("airline", "7", [act(a) for a in gold("7", "head")], task_set="head")
    assert business.db == 1.0
    rows = [p.model_dump() for p in business.env.tools.db.reservations["XEHM4B"].payment_history]
    assert {"payment_id": "credit_card_2408938", "amount": 1072} in rows


def test_v10_task33_refund_to_gift_card_and_bags() -> None:
    v02 = gold("33", "v0.2")
    flights = next(a for a in v02 if a.name == "update_reservation_flights")
    only_flights = run("airline", "33", [act(flights)], task_set="v0.2")
    card = only_flights.env.tools.db.users[only_flights.env.tools.db.reservations["HXDUBJ"].user_id].payment_methods
    assert card["gift_card_6941833"].amount == 338.0
    assert only_flights.env.tools.db.reservations["HXDUBJ"].payment_history[-1].amount == -186
    full = run("airline", "33", [act(a) for a in v02], task_set="v0.2")
    assert full.db == 1.0
    db = full.env.tools.db
    assert db.users[db.reservations["HXDUBJ"].user_id].payment_methods["gift_card_6941833"].amount == 238.0
    assert run("airline", "33", [act(a) for a in v02], task_set="head").db == 0.0
    head = [a for a in gold("33") if a.name.startswith("update")]
    assert run("airline", "33", [act(head[1]), act(head[0])]).db == 1.0  # bags first: still a match


def test_task44_updates_in_any_order_and_the_extra_cancel() -> None:
    updates = [act(a) for a in actions_named(task("airline", "44"), "update_reservation_flights")]
    assert len(updates) == 3
    for order in itertools.permutations(updates):
        assert run("airline", "44", list(order)).db == 1.0
    with_cancel = [call("cancel_reservation", reservation_id="S61CZX"), *updates]
    assert run("airline", "44", with_cancel, task_set="head").db == 0.0
    assert run("airline", "44", with_cancel, task_set="v0.2").db == 1.0


@pytest.mark.parametrize("amount", [50, 50.0])
def test_task2_certificate_amounts(amount: float) -> None:
    send = [call("send_certificate", user_id="noah_muller_9847", amount=amount)]
    head = run("airline", "2", send, task_set="head")
    assert head.db == 0.0
    assert head.tool_results() == [
        f"Certificate certificate_3221322 added to user noah_muller_9847 with amount {amount}."
    ]
    v02 = run("airline", "2", send, task_set="v0.2")
    assert v02.db == 1.0
    stored = v02.env.tools.db.users["noah_muller_9847"].payment_methods["certificate_3221322"]
    assert stored.amount == 50.0 and isinstance(stored.amount, float)


def test_task2_wrong_amount_mismatches_both() -> None:
    send = [call("send_certificate", user_id="noah_muller_9847", amount=100)]
    assert run("airline", "2", send, task_set="head").db == 0.0
    assert run("airline", "2", send, task_set="v0.2").db == 0.0


def test_task29_versions() -> None:
    v02 = [act(a) for a in gold("29", "v0.2")]
    assert run("airline", "29", v02, task_set="head").db == 0.0
    _, cancel, book = gold("29")
    ep = run("airline", "29", [act(book), act(cancel)])
    assert ep.db == 1.0
    assert sum(f.price for f in ep.env.tools.db.reservations["HATHAT"].flights) == 282


def test_task20_booking_twice_fails_on_the_spent_certificate() -> None:
    (book,) = gold("20")
    ep = run("airline", "20", [act(book), act(book)])
    assert ep.tool_results()[1] == "Error: Payment method certificate_7504069 not found"
    assert ep.db == 1.0


def test_task15_reversed_flights_mismatch() -> None:
    (update,) = gold("15")
    assert run("airline", "15", [act(update, flights=update.arguments["flights"][::-1])]).db == 0.0


def test_task33_business_upgrade_exceeds_gift_card() -> None:
    flights = next(a for a in gold("33") if a.name == "update_reservation_flights")
    ep = run("airline", "33", [act(flights, cabin="business")])
    assert ep.tool_results() == ["Error: Gift card balance is not enough"]


@pytest.mark.parametrize("ts", BOTH)
def test_all_gold_with_communicate_info_scores_one(ts: str) -> None:
    for task_id in ("7", "14", "23"):
        t = task("airline", task_id, ts)
        ep = run(
            "airline",
            task_id,
            [*gold_calls(t), say("Done: " + " ".join(t.evaluation_criteria.communicate_info))],
            task_set=ts,
        )
        assert ep.reward == 1.0, (task_id, ep.breakdown())
        silent = run("airline", task_id, [*gold_calls(t), say("Done.")], task_set=ts)
        assert silent.reward == 0.0 and silent.breakdown()["COMMUNICATE"] == 0.0
