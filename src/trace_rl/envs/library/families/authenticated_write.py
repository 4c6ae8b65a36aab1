"""Family `authenticated_write` (easy–medium; tool-calling precision): identify the member, then make exactly one
write with exact arguments, after the member confirms.

Variants: renew a loan, pay part of the fines, cancel a hold, place a hold on a book with no copy on the shelf, return
an overdue copy. Every precondition of the policy holds. The member identifies by email (easy) or, having forgotten
it, by full name and postcode when asked (medium). The agent must say the result (new due date, fines left, late fee).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from trace_rl.envs.library.data_model import Hold, LibraryDB, Member, hold_key
from trace_rl.envs.library.families.common import (
    Draft,
    Identity,
    add_book,
    due_after_renewal,
    identity,
    member_loan,
    pick_member,
    quote,
    request,
    title_key,
)
from trace_rl.envs.library.scenario import Request, UserScript
from trace_rl.envs.library.world import LATE_FEE_PER_DAY, NOW, iso, money

NAME = "authenticated_write"
CAPABILITY = "tool_calling_precision"
LEVEL = 1  # difficulty rank of the family's easiest variant (0 trivial … 3 hard)
VARIANTS = ("renew", "pay_fine", "cancel_hold", "place_hold", "return")


@dataclass
class Write:
    """One write request: the gold calls after identification, the request, and the communicate strings."""

    gold: list[tuple[str, dict[str, Any]]]
    request: Request
    communicate: list[str]
    reason: str
    no_details: bool = False  # True when the gold path does not read the member's record


def renew(rng: random.Random, db: LibraryDB, member: Member) -> Write:
    book = add_book(
        rng, db, [{"borrower": member.member_id, "due_in": rng.randint(1, 9), "renewals": rng.randint(0, 1)}]
    )
    loan = member_loan(db, member, book)
    new_due = due_after_renewal(db, loan)
    text = f"I'd like to renew my loan of {quote(book.title)}."
    req = request("renew", text, match=[[title_key(book.title)], [loan.copy_id.lower()]], evidence=[new_due])
    gold = [("renew_loan", {"copy_id": loan.copy_id})]
    return Write(gold, req, [new_due], f"You want to renew your loan of {quote(book.title)}.")


def pay_fine(rng: random.Random, db: LibraryDB, member: Member) -> Write:
    member.fines = rng.choice((3.5, 4.25, 4.75, 6.5, 8.0))
    amount = rng.choice((1.0, 2.0, 2.5, 3.0))
    left = money(round(member.fines - amount, 2))
    text = f"I'd like to pay {money(amount)} toward my fines."
    req = request("pay_fine", text, match=[[f"#{amount}"]], evidence=[left])
    gold = [("pay_fine", {"member_id": member.member_id, "amount": amount})]
    return Write(gold, req, [left], f"You want to pay {money(amount)} dollars toward your fines, no more.")


def cancel_hold(rng: random.Random, db: LibraryDB, member: Member) -> Write:
    book = add_book(rng, db, [{"on_loan": True, "not_member": member.member_id} for _ in range(2)])
    placed = iso(NOW.replace(day=1))
    db.holds[hold_key(book.book_id, member.member_id)] = Hold(
        book_id=book.book_id, member_id=member.member_id, placed=placed
    )
    text = f"Please cancel my hold on {quote(book.title)}."
    req = request("cancel_hold", text, match=[[title_key(book.title)], [book.book_id.lower()]])
    gold = [("cancel_hold", {"member_id": member.member_id, "book_id": book.book_id})]
    return Write(gold, req, [], f"You no longer want the book {quote(book.title)} and want your hold on it cancelled.")


def place_hold(rng: random.Random, db: LibraryDB, member: Member) -> Write:
    specs: list[dict[str, Any]] = [{"on_loan": True, "not_member": member.member_id} for _ in range(rng.randint(2, 3))]
    if rng.random() < 0.5:
        specs.append({"reference_only": True})
    book = add_book(rng, db, specs)
    text = f"Could you put a hold on {quote(book.title)} for me?"
    req = request("place_hold", text, match=[[title_key(book.title)], [book.book_id.lower()]])
    gold = [
        ("search_catalog", {"query": book.title}),
        ("get_book_copies", {"book_id": book.book_id}),
        ("place_hold", {"member_id": member.member_id, "book_id": book.book_id}),
    ]
    reason = f"You want to place a hold on {quote(book.title)}; you know every copy you could borrow is out."
    return Write(gold, req, [], reason, no_details=True)


def return_copy(rng: random.Random, db: LibraryDB, member: Member) -> Write:
    days_late = rng.randint(1, 12)
    book = add_book(rng, db, [{"borrower": member.member_id, "due_in": -days_late}, {}])
    loan = member_loan(db, member, book)
    fee = money(days_late * LATE_FEE_PER_DAY)
    text = f"I'm returning {quote(book.title)} today; it is a bit late."
    req = request("return", text, match=[[title_key(book.title)], [loan.copy_id.lower()]], evidence=[fee])
    gold = [("return_copy", {"copy_id": loan.copy_id})]
    reason = f"You are returning {quote(book.title)}, a few days late, and want to know the late fee."
    return Write(gold, req, [fee], reason)


MAKERS = {
    "renew": renew,
    "pay_fine": pay_fine,
    "cancel_hold": cancel_hold,
    "place_hold": place_hold,
    "return": return_copy,
}


def identified_gold(who: Identity, member: Member, write: Write) -> list[tuple[str, dict[str, Any]]]:
    reads = [who.gold]
    if not write.no_details:
        reads.append(("get_member_details", {"member_id": member.member_id}))
    return [*reads, *write.gold]


def generate(rng: random.Random, db: LibraryDB) -> Draft:
    variant = rng.choice(VARIANTS)
    member = pick_member(rng, db)
    by = "email" if rng.random() < 0.7 else "name"
    who = identity(member, by=by)
    write = MAKERS[variant](rng, db, member)
    opening = f"Hi! {write.request.text}{who.opening}"
    return Draft(
        variant=f"{variant}/{by}",
        difficulty="easy" if by == "email" else "medium",
        gold=identified_gold(who, member, write),
        communicate=write.communicate,
        script=UserScript(opening=opening, facts=who.facts, requests=[write.request]),
        reason_for_call=write.reason,
        known_info=who.known_info,
        unknown_info=who.unknown_info,
        task_instructions="Agree only to exactly this change.",
        purpose="Identify the member and make one correct change to their account.",
    )
