"""ToolSandbox's stateful tools (contacts, messaging, reminders, settings, end_conversation) over `Tables`.

Behaviour follows the observed input -> output/exception cases of the data package's `tools.json` and the tool
semantics described in the ToolSandbox paper (Lu et al. 2024): fuzzy search through rapidfuzz's WRatio (top 5 above
a threshold), phone numbers validated by `phonenumbers`, setting dependencies (low battery mode turns cellular, wifi
and location off), ids from a per-episode seeded generator. Written in trace-rl's own words; departures: the
`NoDataError` of `remove_contact` / `remove_reminder` names the predicate with a fixed address (`0x0`) where
upstream prints a memory address.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.toolsandbox.similarity import NOT_GIVEN
from trace_rl.envs.toolsandbox.tables import Tables

Row = dict[str, Any]


class DuplicateError(Exception):
    qualified = "polars.exceptions.DuplicateError"


class NoDataError(Exception):
    qualified = "polars.exceptions.NoDataError"


@dataclass
class ToolContext:
    """What a tool call can touch: the episode's tables, the frozen clock and the id generator."""

    tables: Tables
    now: float
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def new_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


# -- validation ------------------------------------------------------------------------------------------------
def validate_phone_number(phone_number: Any) -> None:
    if phone_number is not NOT_GIVEN:
        import phonenumbers

        phonenumbers.parse(phone_number)


def validate_range(value: Any, name: str, lo: float, hi: float) -> None:
    if isinstance(value, (int, float)):
        if value < lo:
            raise ValueError(f"Parameter '{name}' is smaller than its valid range minimum of {lo}.")
        if value > hi:
            raise ValueError(f"Parameter '{name}' is larger than its valid range maximum of {hi}.")


def validate_timestamp(value: Any, name: str) -> None:
    validate_range(value, name, 315529200.0, 2524604400.0)


def validate_latitude(value: Any, name: str) -> None:
    validate_range(value, name, -90.0, 90.0)


def validate_longitude(value: Any, name: str) -> None:
    validate_range(value, name, -180.0, 180.0)


# -- filters ---------------------------------------------------------------------------------------------------
def fuzzy_filter(rows: list[Row], column: str, value: Any, threshold: int = 90) -> list[Row]:
    """rapidfuzz `process.extract` (WRatio, default_process, limit 5) over the column: best matches first."""
    from rapidfuzz import fuzz, process, utils

    choices = [row.get(column) for row in rows]
    matches = process.extract(
        value, choices, processor=utils.default_process, scorer=fuzz.WRatio, score_cutoff=threshold
    )
    return [rows[m[-1]] for m in matches]


def filter_rows(rows: list[Row], criteria: list[tuple[str, Any, Callable[..., list[Row]]]]) -> list[Row]:
    if all(value is NOT_GIVEN for _, value, _ in criteria):
        names = tuple(name for name, _, _ in criteria)
        raise ValueError(f"No search criteria are given. At least one search criteria should be provided among {names}")
    for column, value, method in criteria:
        if value is not NOT_GIVEN:
            rows = method(rows, column, value)
    return rows


def exact(rows: list[Row], column: str, value: Any) -> list[Row]:
    return [r for r in rows if r.get(column) is not None and r[column] == value]


def at_least(rows: list[Row], column: str, value: Any) -> list[Row]:
    return [r for r in rows if r.get(column) is not None and r[column] >= value]


def at_most(rows: list[Row], column: str, value: Any) -> list[Row]:
    return [r for r in rows if r.get(column) is not None and r[column] <= value]


def fuzzy(threshold: int) -> Callable[[list[Row], str, Any], list[Row]]:
    return lambda rows, column, value: fuzzy_filter(rows, column, value, threshold)


# -- contacts --------------------------------------------------------------------------------------------------
def search_contacts(
    ctx: ToolContext,
    person_id: Any = NOT_GIVEN,
    name: Any = NOT_GIVEN,
    phone_number: Any = NOT_GIVEN,
    relationship: Any = NOT_GIVEN,
    is_self: Any = NOT_GIVEN,
) -> list[Row]:
    validate_phone_number(phone_number)
    return filter_rows(
        ctx.tables.snapshot("CONTACT"),
        [
            ("person_id", person_id, exact),
            ("name", name, fuzzy(90)),
            ("phone_number", phone_number, exact),
            ("relationship", relationship, fuzzy(90)),
            ("is_self", is_self, exact),
        ],
    )


def add_contact(
    ctx: ToolContext, name: str, phone_number: str, relationship: str | None = None, is_self: bool = False
) -> str:
    validate_phone_number(phone_number)
    person_id = ctx.new_id()
    if is_self and search_contacts(ctx, is_self=True):
        raise DuplicateError("Self entry already exists. Cannot add another one.")
    row = {"person_id": person_id, "name": name, "phone_number": phone_number}
    ctx.tables.add("CONTACT", [{**row, "relationship": relationship, "is_self": is_self}])
    return person_id


def _replace_row(ctx: ToolContext, db: str, key: str, value: str, updates: dict[str, Any]) -> None:
    matches = [r for r in ctx.tables.snapshot(db) if r[key] == value]
    if not matches:
        raise NoDataError(f"No db entry matching {key}={value!r} found")
    if len(matches) > 1:
        raise DuplicateError(f"More than 1 entry with {key}={value!r} found")
    row = {**matches[0], **{k: v for k, v in updates.items() if v is not NOT_GIVEN}}
    _remove(ctx, db, key, value)
    ctx.tables.add(db, [row])


def _remove(ctx: ToolContext, db: str, key: str, value: str) -> None:
    if not ctx.tables.remove(db, lambda r: r[key] == value):
        expr = f'[([(col("{key}")) == (String({value})))]'
        raise NoDataError(f"No db entry matching predicate=<Expr ['{expr[:30]}…'] at 0x0> found")


def modify_contact(
    ctx: ToolContext,
    person_id: str,
    name: Any = NOT_GIVEN,
    phone_number: Any = NOT_GIVEN,
    relationship: Any = NOT_GIVEN,
    is_self: Any = NOT_GIVEN,
) -> None:
    if all(x is NOT_GIVEN for x in (name, phone_number, relationship, is_self)):
        raise ValueError(
            "No update information given. At least one new field should be provided among "
            "[name, phone_number, relationship, is_self] in order to modify contact"
        )
    validate_phone_number(phone_number)
    selves = search_contacts(ctx, is_self=True)
    if selves and is_self and selves[0]["person_id"] != person_id:
        raise DuplicateError("Self entry already exists. Cannot add another one.")
    updates = {"name": name, "phone_number": phone_number, "relationship": relationship, "is_self": is_self}
    _replace_row(ctx, "CONTACT", "person_id", person_id, updates)


def remove_contact(ctx: ToolContext, person_id: str) -> None:
    _remove(ctx, "CONTACT", "person_id", person_id)


# -- messaging -------------------------------------------------------------------------------------------------
def send_message_with_phone_number(ctx: ToolContext, phone_number: str, content: str) -> str:
    validate_phone_number(phone_number)
    if not get_cellular_service_status(ctx):
        raise ConnectionError("Cellular service is not enabled")
    message_id = ctx.new_id()
    selves = search_contacts(ctx, is_self=True)
    if len(selves) != 1:
        raise DuplicateError(f"1 and only 1 self entry should exist in contacts database, instead found {len(selves)}")
    recipients = search_contacts(ctx, phone_number=phone_number)
    row = {
        "message_id": message_id,
        "sender_person_id": selves[0]["person_id"],
        "sender_phone_number": selves[0]["phone_number"],
        "recipient_person_id": recipients[0]["person_id"] if recipients else None,
        "recipient_phone_number": phone_number,
        "content": content,
        "creation_timestamp": ctx.now,
    }
    ctx.tables.add("MESSAGING", [row])
    return message_id


def search_messages(
    ctx: ToolContext,
    message_id: Any = NOT_GIVEN,
    sender_person_id: Any = NOT_GIVEN,
    sender_phone_number: Any = NOT_GIVEN,
    recipient_person_id: Any = NOT_GIVEN,
    recipient_phone_number: Any = NOT_GIVEN,
    content: Any = NOT_GIVEN,
    creation_timestamp_lowerbound: Any = NOT_GIVEN,
    creation_timestamp_upperbound: Any = NOT_GIVEN,
) -> list[Row]:
    validate_phone_number(sender_phone_number)
    validate_phone_number(recipient_phone_number)
    validate_timestamp(creation_timestamp_lowerbound, "creation_timestamp_lowerbound")
    validate_timestamp(creation_timestamp_upperbound, "creation_timestamp_upperbound")
    return filter_rows(
        ctx.tables.snapshot("MESSAGING"),
        [
            ("message_id", message_id, exact),
            ("sender_person_id", sender_person_id, exact),
            ("sender_phone_number", sender_phone_number, exact),
            ("recipient_person_id", recipient_person_id, exact),
            ("recipient_phone_number", recipient_phone_number, exact),
            ("content", content, fuzzy(50)),
            ("creation_timestamp", creation_timestamp_lowerbound, at_least),
            ("creation_timestamp", creation_timestamp_upperbound, at_most),
        ],
    )


# -- reminders -------------------------------------------------------------------------------------------------
def add_reminder(
    ctx: ToolContext,
    content: str,
    reminder_timestamp: float,
    latitude: float | None = None,
    longitude: float | None = None,
) -> str:
    validate_timestamp(reminder_timestamp, "reminder_timestamp")
    validate_latitude(latitude, "latitude")
    validate_longitude(longitude, "longitude")
    reminder_id = ctx.new_id()
    row = {"reminder_id": reminder_id, "content": content, "creation_timestamp": ctx.now}
    ctx.tables.add(
        "REMINDER", [{**row, "reminder_timestamp": reminder_timestamp, "latitude": latitude, "longitude": longitude}]
    )
    return reminder_id


def modify_reminder(
    ctx: ToolContext,
    reminder_id: str,
    content: Any = NOT_GIVEN,
    reminder_timestamp: Any = NOT_GIVEN,
    latitude: Any = NOT_GIVEN,
    longitude: Any = NOT_GIVEN,
) -> None:
    validate_timestamp(reminder_timestamp, "reminder_timestamp")
    validate_latitude(latitude, "latitude")
    validate_longitude(longitude, "longitude")
    if all(x is NOT_GIVEN for x in (content, reminder_timestamp, latitude, longitude)):
        raise ValueError(
            "No update information given. At least one new field should be provided among "
            "[content, reminder_timestamp, latitude, longitude] in order to modify reminder"
        )
    updates = {
        "content": content,
        "creation_timestamp": ctx.now,
        "reminder_timestamp": reminder_timestamp,
        "latitude": latitude,
        "longitude": longitude,
    }
    _replace_row(ctx, "REMINDER", "reminder_id", reminder_id, updates)


def search_reminder(
    ctx: ToolContext,
    reminder_id: Any = NOT_GIVEN,
    content: Any = NOT_GIVEN,
    creation_timestamp_lowerbound: Any = NOT_GIVEN,
    creation_timestamp_upperbound: Any = NOT_GIVEN,
    reminder_timestamp_lowerbound: Any = NOT_GIVEN,
    reminder_timestamp_upperbound: Any = NOT_GIVEN,
    latitude: Any = NOT_GIVEN,
    longitude: Any = NOT_GIVEN,
) -> list[Row]:
    for name, value in (
        ("creation_timestamp_lowerbound", creation_timestamp_lowerbound),
        ("creation_timestamp_upperbound", creation_timestamp_upperbound),
        ("reminder_timestamp_lowerbound", reminder_timestamp_lowerbound),
        ("reminder_timestamp_upperbound", reminder_timestamp_upperbound),
    ):
        validate_timestamp(value, name)
    validate_latitude(latitude, "latitude")
    validate_longitude(longitude, "longitude")
    return filter_rows(
        ctx.tables.snapshot("REMINDER"),
        [
            ("reminder_id", reminder_id, exact),
            ("content", content, fuzzy(50)),
            ("creation_timestamp", creation_timestamp_lowerbound, at_least),
            ("creation_timestamp", creation_timestamp_upperbound, at_most),
            ("reminder_timestamp", reminder_timestamp_lowerbound, at_least),
            ("reminder_timestamp", reminder_timestamp_upperbound, at_most),
            ("latitude", latitude, exact),
            ("longitude", longitude, exact),
        ],
    )


def remove_reminder(ctx: ToolContext, reminder_id: str) -> None:
    _remove(ctx, "REMINDER", "reminder_id", reminder_id)


# -- settings --------------------------------------------------------------------------------------------------
BOOLEAN_SETTINGS = ("cellular", "wifi", "location_service", "low_battery_mode")


def get_setting(ctx: ToolContext, name: str) -> bool:
    if name not in BOOLEAN_SETTINGS:
        raise KeyError(f"{name} is not a boolean column")
    return ctx.tables.snapshot("SETTING")[0][name]


def set_setting(ctx: ToolContext, name: str, on: bool) -> None:
    if not isinstance(on, bool):
        raise TypeError(f"Parameter 'on' is of type '{type(on)}', but expected '{bool}'.")
    rows = ctx.tables.snapshot("SETTING")
    if bool(get_setting(ctx, name)) == on:
        raise ValueError(f"{name} already {('disabled', 'enabled')[int(on)]}")
    ctx.tables.replace("SETTING", [{**row, name: not row[name]} for row in rows])


def set_low_battery_mode_status(ctx: ToolContext, on: bool) -> None:
    set_setting(ctx, "low_battery_mode", on)
    if on:
        for dependent in ("cellular", "wifi", "location_service"):
            with contextlib.suppress(ValueError):
                set_setting(ctx, dependent, False)


def _guarded_setter(name: str, label: str) -> Callable[..., None]:
    def setter(ctx: ToolContext, on: bool) -> None:
        if on and get_setting(ctx, "low_battery_mode"):
            raise PermissionError(f"{label} cannot be turned on in low battery mode")
        set_setting(ctx, name, on)

    return setter


set_location_service_status = _guarded_setter("location_service", "Location service")
set_cellular_service_status = _guarded_setter("cellular", "Cellular service")
set_wifi_status = _guarded_setter("wifi", "Wifi")


def get_low_battery_mode_status(ctx: ToolContext) -> bool:
    return get_setting(ctx, "low_battery_mode")


def get_location_service_status(ctx: ToolContext) -> bool:
    return get_setting(ctx, "location_service")


def get_cellular_service_status(ctx: ToolContext) -> bool:
    return get_setting(ctx, "cellular")


def get_wifi_status(ctx: ToolContext) -> bool:
    return get_setting(ctx, "wifi")


def get_current_location(ctx: ToolContext) -> dict[str, float]:
    if not get_location_service_status(ctx):
        raise PermissionError("Location service is not enabled.")
    row = ctx.tables.snapshot("SETTING")[0]
    return {"latitude": row["latitude"], "longitude": row["longitude"]}


# -- the user's tool -------------------------------------------------------------------------------------------
def end_conversation(ctx: ToolContext) -> None:
    last = ctx.tables.last_message()
    if not last["conversation_active"]:
        raise ValueError("Conversation already ended")
    last["conversation_active"] = False


__all__ = ["DuplicateError", "NoDataError", "ToolContext"]
