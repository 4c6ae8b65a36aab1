"""Tool semantics, output formats, canonical DB form and the remaining quirk switches (docs/tau2-fidelity.md §3,
§5–7)."""

from __future__ import annotations

import contextlib
import copy
import json
import re

import pytest

from trace_rl.envs.tau2.airline.data_model import FlightDB
from trace_rl.envs.tau2.airline.tools import AirlineTools
from trace_rl.envs.tau2.tools_base import calculate_expression
from trace_rl.types import ToolCall

from .tau2_helpers import domain, needs_data


def execute(env, name: str, **args):
    return env.execute(ToolCall(id="t", name=name, arguments=args))


def fresh(name: str, task_set: str = "head", **quirks: bool):
    env = domain(name, task_set, quirks=tuple(sorted(quirks.items()))).make_env()
    env.reset(domain(name, task_set).tasks("base")[0])
    return env


# -- calculate (no data needed) ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected"),
    [("2 * ((350 - 122) + (499 - 127))", "1200.0"), ("10 / 3", "3.33"), ("2 ** 10", "1024.0"), ("7 // 2", "3.0")],
)
def test_calculate_matches_python(expression: str, expected: str) -> None:
    assert calculate_expression(expression) == expected


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("2 + x", "Invalid characters in expression"),
        ("1 / 0", "division by zero"),
        ("2 ** 2 ** 2 ** 2 ** 2 ** 2", "int too large to convert to float"),
        ("(2)(3)", "'int' object is not callable"),
    ],
)
def test_calculate_errors_fast(expression: str, error: str) -> None:
    expect_warning = pytest.warns(SyntaxWarning) if expression == "(2)(3)" else contextlib.nullcontext()
    with expect_warning, pytest.raises(Exception, match=re.escape(error)):
        calculate_expression(expression)


# -- tiny airline DB (no data needed) ---------------------------------------------------------------------------
def tiny_airline() -> FlightDB:
    seats = {"business": 5, "economy": 5, "basic_economy": 5}
    prices = {"business": 500, "economy": 200, "basic_economy": 100}
    available = {"status": "available", "available_seats": seats, "prices": prices}

    def flight(number: str, origin: str, dest: str, dep: str, arr: str) -> dict:
        dates = {d: copy.deepcopy(available) for d in ("2024-05-05", "2024-05-06", "2024-05-16", "2024-05-17")}
        return {
            "flight_number": number,
            "origin": origin,
            "destination": dest,
            "scheduled_departure_time_est": dep,
            "scheduled_arrival_time_est": arr,
            "dates": dates,
        }

    return FlightDB.model_validate(
        {
            "flights": {
                "HAT001": flight("HAT001", "SFO", "JFK", "22:00:00", "06:00:00+1"),
                "HAT002": flight("HAT002", "JFK", "BOS", "08:00:00", "09:00:00"),
            },
            "users": {},
            "reservations": {},
        }
    )


@pytest.mark.parametrize(
    ("quirk", "day", "pairs", "second_date"),
    [(True, "05", 0, None), (False, "05", 1, "2024-05-06"), (True, "16", 1, "2024-05-17")],
)
def test_onestop_date_arithmetic_quirk(quirk: bool, day: str, pairs: int, second_date: str | None) -> None:
    tools = AirlineTools(copy.deepcopy(tiny_airline()), quirks={"onestop_date_arithmetic": quirk})
    found = tools.search_onestop_flight("SFO", "BOS", f"2024-05-{day}")
    assert len(found) == pairs
    if pairs:
        assert found[0][0].date == f"2024-05-{day}" and found[0][1].date == second_date


def test_direct_search_has_null_date_and_db_order() -> None:
    tools = AirlineTools(copy.deepcopy(tiny_airline()))
    (hit,) = tools.search_direct_flight("SFO", "JFK", "2024-05-16")
    dumped = hit.model_dump()
    assert dumped["date"] is None and list(dumped)[:4] == ["flight_number", "origin", "destination", "status"]


def test_frozen_db_is_read_only() -> None:
    db = tiny_airline().freeze()
    assert copy.deepcopy(db)._origin is db
    with pytest.raises(RuntimeError):
        db.writable("flights", "HAT001")


@pytest.mark.parametrize("frozen", [True, False])
def test_copies_share_nothing_written(frozen: bool) -> None:
    db = tiny_airline().freeze() if frozen else tiny_airline()
    a, b = copy.deepcopy(db), copy.deepcopy(db)
    a.writable("flights", "HAT001").dates["2024-05-16"].available_seats["economy"] = 0
    assert b.flights["HAT001"].dates["2024-05-16"].available_seats["economy"] == 5
    assert db.flights["HAT001"].dates["2024-05-16"].available_seats["economy"] == 5
    assert a.get_hash() != b.get_hash() == db.get_hash()
    c = copy.deepcopy(a)  # a copy of a copy keeps the private record
    assert c.get_hash() == a.get_hash() and c.full_hash() == a.full_hash()
    a.writable("flights", "HAT001").dates["2024-05-16"].available_seats["economy"] = 5
    assert a.get_hash() == db.get_hash()


# -- data-backed ------------------------------------------------------------------------------------------------
@needs_data
def test_retail_canonical_form_and_output_order() -> None:
    env = fresh("retail")
    out = json.loads(execute(env, "get_order_details", order_id="#W2611340").content)
    assert list(out)[:7] == ["order_id", "user_id", "address", "items", "status", "fulfillments", "payment_history"]
    for key in ("cancel_reason", "exchange_items", "exchange_new_items", "exchange_payment_method_id"):
        assert key in out and out[key] is None
    assert list(out["address"]) == ["address1", "address2", "city", "country", "state", "zip"]
    types = json.loads(execute(env, "list_all_product_types").content)
    assert list(types) == sorted(types) and len(types) == 50
    assert execute(env, "find_user_id_by_email", email="NOAH.BROWN7922@example.com").content == "noah_brown_6181"
    assert execute(env, "find_user_id_by_name_zip", first_name="noah", last_name="BROWN", zip="80279").content == (
        "noah_brown_6181"
    )


@needs_data
def test_retail_v02_hides_get_item_details() -> None:
    head, v02 = domain("retail", "head").make_env(), domain("retail", "v0.2").make_env()
    assert len(head.tool_schemas()) == 16 and len(v02.tool_schemas()) == 15
    assert "get_item_details" not in {s["function"]["name"] for s in v02.tool_schemas()}
    assert execute(v02, "get_item_details", item_id="9612497925").content == "Error: Tool 'get_item_details' not found."
    assert json.loads(execute(head, "get_item_details", item_id="9612497925").content)["price"] == 50.88


@needs_data
def test_retail_cancel_credits_gift_card_and_blocks_repeat() -> None:
    env = fresh("retail")
    order_id = "#W2611340"  # processed: cannot be cancelled
    assert execute(env, "cancel_pending_order", order_id=order_id, reason="no longer needed").content == (
        "Error: Non-pending order cannot be cancelled"
    )
    db = env.tools.db
    pending = next(
        o
        for o in db.orders.values()
        if o.status == "pending" and o.payment_history[0].payment_method_id.startswith("gift")
    )
    card_id = pending.payment_history[0].payment_method_id
    before = db.users[pending.user_id].payment_methods[card_id].balance
    assert (
        execute(env, "cancel_pending_order", order_id=pending.order_id, reason="other").content
        == "Error: Invalid reason"
    )
    result = json.loads(
        execute(env, "cancel_pending_order", order_id=pending.order_id, reason="ordered by mistake").content
    )
    assert result["status"] == "cancelled" and result["payment_history"][-1]["transaction_type"] == "refund"
    after = env.tools.db.users[pending.user_id].payment_methods[card_id].balance
    assert after == round(before + pending.payment_history[0].amount, 2)


@needs_data
def test_exchange_same_item_quirk() -> None:
    for quirk, expect_error in ((True, False), (False, True)):
        env = fresh("retail", exchange_same_item=quirk)
        order = next(o for o in env.tools.db.orders.values() if o.status == "delivered")
        item = order.items[0].item_id
        method = order.payment_history[0].payment_method_id
        args = {"order_id": order.order_id, "item_ids": [item], "new_item_ids": [item], "payment_method_id": method}
        result = execute(env, "exchange_delivered_order_items", **args)
        if expect_error:
            assert result.content == "Error: The new item id should be different from the old item id"
        elif not result.error:
            assert json.loads(result.content)["exchange_price_difference"] == 0.0


@needs_data
def test_airline_canonical_form() -> None:
    env = fresh("airline")
    user = json.loads(execute(env, "get_user_details", user_id="mia_li_3668").content)
    assert user["payment_methods"]["certificate_4856383"]["amount"] == 100.0
    assert isinstance(user["payment_methods"]["certificate_4856383"]["amount"], float)
    assert "address2" in user["address"]
    res = json.loads(execute(env, "get_reservation_details", reservation_id="4WQ150").content)
    assert res["status"] is None and isinstance(res["payment_history"][0]["amount"], int)
    assert execute(env, "get_flight_status", flight_number="HAT001", date="2024-05-01").content == "landed"
    airports = json.loads(execute(env, "list_all_airports").content)
    assert airports[0] == {"iata": "SFO", "city": "San Francisco"} and airports[-1]["iata"] == "LGA"
    assert execute(env, "get_flight_status", flight_number="HAT001", date="2024-06-01").content == (
        "Error: Flight HAT001 not found on date 2024-06-01"
    )


BOOK = {
    "user_id": "mia_li_3668",
    "origin": "JFK",
    "destination": "SEA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}, {"flight_number": "HAT039", "date": "2024-05-20"}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_methods": [
        {"payment_id": "certificate_7504069", "amount": 250},
        {"payment_id": "credit_card_4421486", "amount": 5},
    ],
    "total_baggages": 3,
    "nonfree_baggages": 0,
    "insurance": "no",
}


def _seats(env, flight: str = "HAT136") -> int:
    return env.tools.db.flights[flight].dates["2024-05-20"].available_seats["economy"]


@needs_data
@pytest.mark.parametrize(("quirk", "after_cancel"), [(True, 13), (False, 14)])
def test_cancel_seat_release_quirk(quirk: bool, after_cancel: int) -> None:
    env = fresh("airline", cancel_keeps_seats=quirk)
    assert not execute(env, "book_reservation", **BOOK).error and _seats(env) == 13
    assert not execute(env, "cancel_reservation", reservation_id="HATHAT").error
    assert _seats(env) == after_cancel


@needs_data
@pytest.mark.parametrize("quirk", [True, False])
def test_update_flights_seat_quirk(quirk: bool) -> None:
    env = fresh("airline", update_flights_keeps_seats=quirk)
    assert not execute(env, "book_reservation", **BOOK).error
    before_new = env.tools.db.flights["HAT039"].dates["2024-05-22"].available_seats["economy"]
    flights = [{"flight_number": "HAT136", "date": "2024-05-20"}, {"flight_number": "HAT039", "date": "2024-05-22"}]
    result = execute(
        env,
        "update_reservation_flights",
        reservation_id="HATHAT",
        cabin="economy",
        flights=flights,
        payment_id="credit_card_4421486",
    )
    assert not result.error, result.content
    dropped = _seats(env, "HAT039")
    new = env.tools.db.flights["HAT039"].dates["2024-05-22"].available_seats["economy"]
    assert _seats(env, "HAT136") == 13  # kept segment untouched either way
    assert (dropped, new) == ((9, before_new) if quirk else (10, before_new - 1))


@needs_data
def test_raw_baggage_quirk() -> None:
    for quirk, stored in ((True, 2.0), (False, 2)):
        env = fresh("airline", raw_baggage_values=quirk)
        args = {"reservation_id": "YAX4DR", "nonfree_baggages": 0, "payment_id": "credit_card_4938634"}
        assert not execute(env, "update_reservation_baggages", total_baggages=2.0, **args).error
        value = env.tools.db.reservations["YAX4DR"].total_baggages
        assert value == 2 and type(value) is type(stored)
    strict = fresh("airline", raw_baggage_values=False)
    bad = execute(
        strict,
        "update_reservation_baggages",
        reservation_id="YAX4DR",
        total_baggages=2.5,
        nonfree_baggages=0,
        payment_id="credit_card_4938634",
    )
    assert bad.error


@needs_data
def test_raw_cabin_quirk() -> None:
    raw = fresh("airline")
    result = execute(
        raw,
        "update_reservation_flights",
        reservation_id="YAX4DR",
        cabin="first",
        flights=[],
        payment_id="credit_card_4938634",
    )
    assert not result.error and raw.tools.db.reservations["YAX4DR"].cabin == "first"
    strict = fresh("airline", raw_cabin_value=False)
    result = execute(
        strict,
        "update_reservation_flights",
        reservation_id="YAX4DR",
        cabin="first",
        flights=[],
        payment_id="credit_card_4938634",
    )
    assert result.content == "Error: Invalid cabin: first"
    flights = [{"flight_number": "HAT136", "date": "2024-05-20"}]
    keyerr = execute(
        raw, "update_reservation_flights", reservation_id="4WQ150", cabin="first", flights=flights, payment_id="x"
    )
    assert keyerr.content == "Error: 'first'"


@needs_data
def test_duplicate_certificate_quirk() -> None:
    # 255 for the flights + 5 paid bags (250) = 505 = 250 + 250 (the same certificate twice) + 5
    certificate = {"payment_id": "certificate_7504069", "amount": 250}
    payments = [certificate, certificate, {"payment_id": "credit_card_4421486", "amount": 5}]
    twice = dict(BOOK, payment_methods=payments, nonfree_baggages=5)
    env = fresh("airline")
    result = execute(env, "book_reservation", **twice)
    assert result.content == "Error: 'certificate_7504069'"  # KeyError after the first use removed it
    db = env.tools.db
    assert "certificate_7504069" not in db.users["mia_li_3668"].payment_methods and "HATHAT" not in db.reservations
    strict = fresh("airline", book_duplicate_payments=False)
    result = execute(strict, "book_reservation", **twice)
    assert result.content == "Error: Payment method certificate_7504069 listed more than once"
    assert "certificate_7504069" in strict.tools.db.users["mia_li_3668"].payment_methods
