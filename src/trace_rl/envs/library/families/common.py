"""Helpers every task family uses: picking and shaping members, adding scenario books and loans, identification,
and turning a family's `Draft` into a τ²-shaped `Task`.

Families mutate a private copy of the generated world; `build_task` stores only the difference (a deep-merge patch)
in the task's initial state, so a task is its world seed plus a small patch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from trace_rl.envs.library.data_model import Book, Copy, LibraryDB, Loan, Member
from trace_rl.envs.library.patch import world_patch
from trace_rl.envs.library.scenario import Request, UserScript
from trace_rl.envs.library.world import (
    FORMATS,
    LOAN_DAYS,
    NOW,
    iso,
    new_person,
    new_title,
    taken_ids,
    unique_id,
)
from trace_rl.types import Action, EvaluationCriteria, InitialState, RewardType, Task

DOMAIN = "library"
STOP_HINT = "When everything you came for is handled (or refused with a reason), end the conversation with ###STOP###."


@dataclass
class Draft:
    """A family generator's output, before it becomes a Task."""

    variant: str
    difficulty: str  # trivial | easy | medium | hard
    gold: list[tuple[str, dict[str, Any]]]
    communicate: list[str]
    script: UserScript
    reason_for_call: str
    known_info: str
    unknown_info: str
    task_instructions: str
    purpose: str
    notes: dict[str, Any] = field(default_factory=dict)


# -- members --------------------------------------------------------------------------------------------------------
def pick_member(rng: random.Random, db: LibraryDB, *, eligible: bool = True) -> Member:
    """A random member; `eligible` makes the card active and keeps fines under the limit (below 5.00)."""
    member = db.members[rng.choice(sorted(db.members))]
    if eligible:
        member.card_status = "active"
        if member.fines >= 5.0:
            member.fines = 1.25
    return member


@dataclass
class Identity:
    """How the member identifies themselves, and the gold lookup that goes with it."""

    by: str  # email | name
    gold: tuple[str, dict[str, Any]]
    opening: str  # appended to the opening line ("" when the member waits to be asked)
    facts: dict[str, str]
    known_info: str
    unknown_info: str


def identity(member: Member, *, by: str) -> Identity:
    """`by="email"`: the member gives their email up front; `by="name"`: they forgot it and give their full name
    and postcode when asked."""
    name_facts = {"first_name": member.first_name, "last_name": member.last_name, "postcode": member.postcode}
    if by == "email":
        return Identity(
            by="email",
            gold=("find_member_by_email", {"email": member.email}),
            opening=f" My email is {member.email}.",
            facts={"email": member.email, **name_facts},
            known_info=f"Your email is {member.email}. Your name is {member.name}; your postcode is {member.postcode}.",
            unknown_info="You do not know your member id or any copy or book ids.",
        )
    return Identity(
        by="name",
        gold=("find_member_by_name", name_facts),
        opening="",
        facts=name_facts,
        known_info=f"Your name is {member.name}; your postcode is {member.postcode}. Give them when asked.",
        unknown_info="You do not remember your email address. You do not know your member id or any ids.",
    )


# -- books, copies, loans -------------------------------------------------------------------------------------------
def add_book(rng: random.Random, db: LibraryDB, copies: list[dict[str, Any]]) -> Book:
    """Add a new book with the given copies. A copy spec may set format, language, edition, reference_only, and
    `borrower` (a member id: the copy is on loan to them; `due`, `renewals` optional) or `on_loan=True` (lent to
    some other member)."""
    taken = taken_ids(db)
    names = {m.name for m in db.members.values()} | {b.author for b in db.books.values()}
    first, last = new_person(rng, names)
    year = rng.randint(1960, 2018)
    book = Book(
        book_id=unique_id(rng, "B", 100, 999, taken),
        title=new_title(rng, {b.title for b in db.books.values()}),
        author=f"{first} {last}",
        year=year,
    )
    db.books[book.book_id] = book
    for spec in copies:
        fmt = spec.get("format", rng.choice(FORMATS[:2]))
        copy = Copy(
            copy_id=unique_id(rng, "C", 1000, 9999, taken),
            book_id=book.book_id,
            format=fmt,
            edition=spec.get("edition", rng.randint(year, 2024)),
            language=spec.get("language", "English"),
            reference_only=spec.get("reference_only", False),
            loan_days=LOAN_DAYS[fmt],
            status="available",
        )
        db.copies[copy.copy_id] = copy
        borrower = spec.get("borrower")
        if borrower is None and spec.get("on_loan"):
            borrower = other_member(rng, db, spec.get("not_member"))
        if borrower is not None:
            lend(db, copy, borrower, due_in=spec.get("due_in", rng.randint(3, 12)), renewals=spec.get("renewals", 0))
    return book


def lend(db: LibraryDB, copy: Copy, member_id: str, *, due_in: int, renewals: int = 0) -> Loan:
    """Put `copy` on loan to `member_id`, due `due_in` days from now (negative: overdue)."""
    due = NOW + timedelta(days=due_in)
    checked_out = due - timedelta(days=copy.loan_days * (renewals + 1))
    loan = Loan(
        copy_id=copy.copy_id, member_id=member_id, checked_out=iso(checked_out), due=iso(due), renewals=renewals
    )
    db.loans[copy.copy_id] = loan
    copy.status = "on loan"
    return loan


def other_member(rng: random.Random, db: LibraryDB, not_member: str | None) -> str:
    return rng.choice(sorted(m for m in db.members if m != not_member))


def member_loan(db: LibraryDB, member: Member, book: Book) -> Loan:
    """The member's (single) loan of a copy of `book`."""
    loans = [ln for ln in db.member_loans(member.member_id) if db.copies[ln.copy_id].book_id == book.book_id]
    assert len(loans) == 1, "scenario books are lent once per member"
    return loans[0]


def due_after_renewal(db: LibraryDB, loan: Loan) -> str:
    from trace_rl.envs.library.world import parse_date

    return iso(parse_date(loan.due) + timedelta(days=db.copies[loan.copy_id].loan_days))


def quote(title: str) -> str:
    return f'"{title}"'


def title_key(title: str) -> str:
    return title.lower()


# -- requests -------------------------------------------------------------------------------------------------------
def request(
    kind: str, text: str, *, match: list[list[str]] | None = None, evidence: list[str] | None = None
) -> Request:
    return Request(kind=kind, text=text, match=match or [], evidence=evidence or [])  # type: ignore[arg-type]


# -- task -----------------------------------------------------------------------------------------------------------
def build_task(*, family: str, seed: int, capability: str, base: LibraryDB, scenario: LibraryDB, draft: Draft) -> Task:
    """The τ²-shaped task: scenario, initial-state patch, gold actions, communicate info, metadata."""
    task_id = f"{family}-{seed}"
    patch = world_patch(base.model_dump(mode="python"), scenario.model_dump(mode="python"))
    actions = [
        Action(action_id=f"{task_id}-{i}", name=name, arguments=args) for i, (name, args) in enumerate(draft.gold)
    ]
    return Task(
        id=task_id,
        description={"purpose": draft.purpose, "relevant_policies": None, "notes": draft.variant},
        user_scenario={
            "persona": None,
            "instructions": {
                "domain": DOMAIN,
                "reason_for_call": draft.reason_for_call,
                "known_info": draft.known_info,
                "unknown_info": draft.unknown_info,
                "task_instructions": f"{draft.task_instructions} {STOP_HINT}".strip(),
            },
        },
        initial_state=InitialState(initialization_data={"agent_data": patch}) if patch else None,
        evaluation_criteria=EvaluationCriteria(
            actions=actions,
            communicate_info=list(draft.communicate),
            reward_basis=[RewardType.DB, RewardType.COMMUNICATE],
        ),
        metadata={
            "family": family,
            "variant": draft.variant,
            "difficulty": draft.difficulty,
            "capability_type": capability,
            "seed": seed,
            "world_seed": seed,
            "user_script": draft.script.model_dump(mode="json"),
            **draft.notes,
        },
    )
