"""ToolSandbox's world databases as versioned tables (apple/ToolSandbox `ExecutionContext`, commit 165848b).

Every database is one list of rows, each stamped with `sandbox_message_index`. The first row is a *headguard* (every
column null but the stamp) so that an empty table can be told apart from a missing one. The four world databases
(SETTING, CONTACT, MESSAGING, REMINDER) keep a full copy of the table per change, stamped with the index of the
message being processed (current max SANDBOX index + 1); SANDBOX is append-only, one row per message. The state at
message index i is the set of rows with the largest stamp <= i. These rules, including the upstream corner where a
snapshot emptied by a removal disappears (its stamp no longer occurs, so a lookup falls back to the previous
snapshot), are reproduced exactly because the evaluator compares snapshots.

Written from the ToolSandbox paper and the data package's README; no upstream code is copied.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable, Iterable
from typing import Any

STAMP = "sandbox_message_index"
DATABASES = ("SANDBOX", "SETTING", "CONTACT", "MESSAGING", "REMINDER")
WORLD_DATABASES = ("SETTING", "CONTACT", "MESSAGING", "REMINDER")

Row = dict[str, Any]


def is_headguard(row: Row) -> bool:
    return all(value is None for key, value in row.items() if key != STAMP)


def drop_headguard(rows: Iterable[Row]) -> list[Row]:
    return [row for row in rows if not is_headguard(row)]


class Tables:
    """The five databases of one episode, with ToolSandbox's snapshot semantics."""

    def __init__(self, columns: dict[str, list[str]], rows: dict[str, list[Row]]) -> None:
        self.columns = {name: list(cols) for name, cols in columns.items()}
        self.rows = {name: [dict(r) for r in rows[name]] for name in DATABASES}

    @classmethod
    def from_initial(cls, initial_databases: dict[str, Any]) -> Tables:
        columns = {name: [c["name"] for c in initial_databases[name]["columns"]] for name in DATABASES}
        return cls(columns, {name: initial_databases[name]["rows"] for name in DATABASES})

    def copy(self) -> Tables:
        return Tables(self.columns, copy.deepcopy(self.rows))

    # -- reading -------------------------------------------------------------------------------------------------
    @property
    def max_index(self) -> int:
        """The largest SANDBOX message index (-1 when there is no message)."""
        stamps = [row[STAMP] for row in drop_headguard(self.rows["SANDBOX"])]
        return max(stamps) if stamps else -1

    def snapshot_stamp(self, name: str, index: int) -> int:
        """The stamp of the most recent snapshot no later than `index` (-1 for a database that was never filled)."""
        if not drop_headguard(self.rows[name]):
            return -1
        stamps = sorted({row[STAMP] for row in self.rows[name]})
        return stamps[max(bisect.bisect_right(stamps, index) - 1, 0)]

    def snapshot(self, name: str, index: int | None = None, *, history: bool = False) -> list[Row]:
        """The rows of `name` at message `index` (default: the current state), stamps and headguard dropped.

        With `history`, every row of every snapshot up to that one (the SANDBOX message log, for instance)."""
        if index is None:
            index = self.max_index + 1
        stamp = self.snapshot_stamp(name, index)
        keep: Callable[[int], bool] = (lambda s: s <= stamp) if history else (lambda s: s == stamp)
        out = []
        for row in self.rows[name]:
            if keep(row[STAMP]) and not is_headguard(row):
                out.append({k: v for k, v in row.items() if k != STAMP})
        return out

    def first_user_index(self) -> int:
        """Index of the first user message that is not a user-simulator few-shot turn (-1 if none)."""
        for row in drop_headguard(self.rows["SANDBOX"]):
            if row["sender"] == "USER" and row["visible_to"] != ["USER"]:
                return int(row[STAMP])
        return -1

    # -- writing (world databases) -----------------------------------------------------------------------------
    def _open_snapshot(self, name: str) -> int:
        """Make sure a snapshot stamped max_index + 1 exists (a copy of the latest one) and return that stamp."""
        target = self.max_index + 1
        if not any(row[STAMP] == target for row in self.rows[name]):
            latest = self.snapshot_stamp(name, self.max_index)
            self.rows[name].extend({**row, STAMP: target} for row in self.rows[name] if row[STAMP] == latest)
        return target

    def add(self, name: str, rows: list[Row]) -> None:
        if name == "SANDBOX":
            raise KeyError("use add_message for SANDBOX")
        for row in rows:
            if all(row.get(c) is None for c in self.columns[name] if c != STAMP):
                raise ValueError("Cannot add row with all None values. All None values are reserved for headguard")
        stamp = self._open_snapshot(name)
        for row in rows:
            self.rows[name].append({c: (stamp if c == STAMP else row.get(c)) for c in self.columns[name]})

    def remove(self, name: str, match: Callable[[Row], bool]) -> int:
        """Remove the current rows matching `match`; returns how many (0: nothing matched, nothing removed)."""
        stamp = self._open_snapshot(name)
        doomed = [i for i, row in enumerate(self.rows[name]) if row[STAMP] == stamp and match(row)]
        if not doomed:
            return 0
        gone = set(doomed)
        self.rows[name] = [row for i, row in enumerate(self.rows[name]) if i not in gone or is_headguard(row)]
        return len(doomed)

    def replace(self, name: str, rows: list[Row]) -> None:
        """Replace the current snapshot of a world database by `rows` (ToolSandbox `update_database`)."""
        stamp = self._open_snapshot(name)
        headguard = {c: (stamp if c == STAMP else None) for c in self.columns[name]}
        new = [headguard] + [{c: (stamp if c == STAMP else row.get(c)) for c in self.columns[name]} for row in rows]
        self.rows[name] = [row for row in self.rows[name] if row[STAMP] != stamp] + new

    # -- writing (SANDBOX) -------------------------------------------------------------------------------------
    def add_message(self, row: Row) -> int:
        """Append one SANDBOX message (conversation_active carried over when not given); returns its index."""
        log = drop_headguard(self.rows["SANDBOX"])
        previous = log[-1]["conversation_active"] if log else True
        index = self.max_index + 1
        full = {c: row.get(c) for c in self.columns["SANDBOX"]}
        full[STAMP] = index
        if full.get("conversation_active") is None:
            full["conversation_active"] = previous
        self.rows["SANDBOX"].append(full)
        return index

    def last_message(self) -> Row:
        """The most recent SANDBOX row (mutable: tool traces and end_conversation update it in place)."""
        return self.rows["SANDBOX"][-1]


__all__ = ["DATABASES", "STAMP", "WORLD_DATABASES", "Row", "Tables", "drop_headguard", "is_headguard"]
