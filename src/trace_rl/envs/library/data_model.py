"""The library's database: members, books, copies, active loans and holds, at a fixed date.

Everything is keyed by id in dicts (loans by copy id, holds by `<book_id>/<member_id>`), so a task's scenario can be
written as a deep-merge patch over a generated world, and the canonical hash does not depend on insertion order.
Money is stored in dollars as floats; every generated amount is a multiple of 0.25, so sums are exact.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from trace_rl.envs.toolkit import DB

CARD_STATUSES = ("active", "expired", "suspended")
COPY_STATUSES = ("available", "on loan")


class LibraryRecord(BaseModel):
    """Base of the library's records: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class Member(LibraryRecord):
    member_id: str
    first_name: str
    last_name: str
    email: str
    postcode: str
    card_status: str  # one of CARD_STATUSES
    fines: float

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"


class Book(LibraryRecord):
    """A work in the catalog; its physical copies are `Copy` records."""

    book_id: str
    title: str
    author: str
    year: int


class Copy(LibraryRecord):
    """One physical copy of a book: an edition in a format and language."""

    copy_id: str
    book_id: str
    format: str  # paperback | hardcover | large print | audiobook
    edition: int
    language: str
    reference_only: bool
    loan_days: int
    status: str  # one of COPY_STATUSES


class Loan(LibraryRecord):
    """An active loan; at most one per copy, so loans are keyed by copy id."""

    copy_id: str
    member_id: str
    checked_out: str
    due: str
    renewals: int


class Hold(LibraryRecord):
    """A member's place in a book's hold queue."""

    book_id: str
    member_id: str
    placed: str


def hold_key(book_id: str, member_id: str) -> str:
    return f"{book_id}/{member_id}"


class LibraryDB(DB):
    """One library world. `now` is the fixed current date every tool uses."""

    now: str
    members: dict[str, Member]
    books: dict[str, Book]
    copies: dict[str, Copy]
    loans: dict[str, Loan]
    holds: dict[str, Hold]

    def member_loans(self, member_id: str) -> list[Loan]:
        return sorted(
            (ln for ln in self.loans.values() if ln.member_id == member_id), key=lambda ln: (ln.due, ln.copy_id)
        )

    def member_holds(self, member_id: str) -> list[Hold]:
        return sorted((h for h in self.holds.values() if h.member_id == member_id), key=lambda h: h.book_id)

    def book_copies(self, book_id: str) -> list[Copy]:
        return sorted((c for c in self.copies.values() if c.book_id == book_id), key=lambda c: c.copy_id)

    def book_holds(self, book_id: str) -> list[Hold]:
        """The hold queue of a book, in order (placed date, then member id)."""
        return sorted((h for h in self.holds.values() if h.book_id == book_id), key=lambda h: (h.placed, h.member_id))
