"""Upstream τ²-bench quirks that change rewards, each reproduced by default and switchable by name.

Set `env.quirks: {<name>: false}` in the config to turn one off (the gold replay uses the same setting, so a task's
gold DB follows the switch too). Unknown names are a `UserError` listing the known ones. Why they are
kept: docs/tau2-fidelity.md §7.

mock
- `unchecked_status`: `update_task_status` stores any status string (e.g. "done"). Off: anything but
  "pending"/"completed" is the error `Invalid status: <status>`.

retail (`modify_pending_order_items` unless stated)
- `modify_items_last_variant`: every modified item takes the price and options of the *last* validated new variant
  (upstream issues #317/#318), which makes the result depend on argument order. Off: each item takes its own.
- `modify_items_zero_refund`: a zero price difference appends a 0.0 "refund" record. Off: no record.
- `modify_items_unrounded_diff`: the price difference is summed without rounding, so float noise (and the order of
  the items) reaches the payment record. Off: rounded to 2 dp, as `exchange_delivered_order_items` does.
- `exchange_same_item`: `exchange_delivered_order_items` accepts a new item equal to the old one. Off: the error
  `The new item id should be different from the old item id`, as in `modify_pending_order_items`.

airline
- `cancel_keeps_seats`: `cancel_reservation` releases no seats. Off: each segment on an available flight date gets
  its passengers' seats back in the reservation's cabin.
- `cancel_repeatable`: a cancelled reservation can be cancelled again, appending the negated history again. Off:
  the error `Reservation <id> is already cancelled`.
- `update_flights_keeps_seats`: `update_reservation_flights` takes no seats for new segments and releases none for
  dropped ones. Off: both are applied (available flight dates only).
- `raw_baggage_values`: `update_reservation_baggages` stores both bag counts as passed (`2.0` stays a float and no
  longer matches the gold `2`). Off: coerced to int as `book_reservation` does (`2.5` is an error).
- `raw_cabin_value`: `update_reservation_flights` stores the cabin as passed, valid or not. Off: an unknown cabin is
  the error `Invalid cabin: <cabin>` before anything else.
- `onestop_date_arithmetic`: `search_onestop_flight` computes the next day of an overnight first leg as
  "2024-05-" + (day + 1), unpadded and without month rollover ("2024-05-6", "2024-05-31"). Off: the real next date.
- `book_duplicate_payments`: `book_reservation` checks payments one entry at a time, so a gift card listed twice can
  go below zero and a certificate listed twice fails half-way (`Error: '<id>'`) after charging earlier entries. Off:
  a payment id listed twice is the error `Payment method <id> listed more than once`, before any change.

Departure, not a quirk: `calculate` refuses integer powers whose result would exceed 10 million bits with Python's
own overflow message (upstream would hang for minutes before failing the same way).
"""

from __future__ import annotations

from collections.abc import Mapping

from trace_rl.errors import UserError

QUIRKS: dict[str, dict[str, str]] = {
    "mock": {
        "unchecked_status": "update_task_status stores any status string",
    },
    "retail": {
        "modify_items_last_variant": "modified items take the price/options of the last validated variant",
        "modify_items_zero_refund": "a zero price difference appends a 0.0 refund record",
        "modify_items_unrounded_diff": "the price difference is not rounded",
        "exchange_same_item": "exchange accepts new item == old item",
    },
    "airline": {
        "cancel_keeps_seats": "cancel_reservation releases no seats",
        "cancel_repeatable": "a cancelled reservation can be cancelled again",
        "update_flights_keeps_seats": "update_reservation_flights changes no seat counts",
        "raw_baggage_values": "bag counts are stored as passed",
        "raw_cabin_value": "update_reservation_flights stores the cabin as passed",
        "onestop_date_arithmetic": "one-stop next-day date is '2024-05-' + str(day + 1)",
        "book_duplicate_payments": "book_reservation checks duplicated payment ids entry by entry",
    },
}


def resolve_quirks(domain: str, overrides: Mapping[str, bool] | None) -> dict[str, bool]:
    """All quirks of `domain` on, then the overrides; unknown names are a UserError listing the known ones."""
    known = QUIRKS.get(domain, {})
    settings = dict.fromkeys(known, True)
    for name, value in (overrides or {}).items():
        if name not in known:
            listing = ", ".join(sorted(known)) or "none"
            raise UserError(f"env.quirks: unknown quirk '{name}' for tau2:{domain} (known: {listing})")
        settings[name] = bool(value)
    return settings
