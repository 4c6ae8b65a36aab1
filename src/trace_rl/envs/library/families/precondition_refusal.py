"""Family `precondition_refusal` (medium; precondition verification): the member asks for a change the policy
forbids, the tools would allow it, and the right outcome is a refusal that quotes the blocking value.

Variants: borrow while fines are at or over the limit (say the amount), borrow with an expired or suspended card (say
the status), renew a loan already renewed twice or wanted by another member's hold (say the current due date), place a
hold on a book with a copy on the shelf (say that copy's id), borrow a book whose only copy in is reference-only (say
"reference"). Gold actions are reads only: the DB must be unchanged.
"""

from __future__ import annotations

import random
from typing import Any

from trace_rl.envs.library.data_model import Hold, LibraryDB, hold_key
from trace_rl.envs.library.families.common import (
    Draft,
    add_book,
    identity,
    member_loan,
    other_member,
    pick_member,
    quote,
    request,
    title_key,
)
from trace_rl.envs.library.scenario import UserScript
from trace_rl.envs.library.world import NOW, iso, money

NAME = "precondition_refusal"
CAPABILITY = "precondition_verification"
LEVEL = 2  # difficulty rank of the family's easiest variant (0 trivial … 3 hard)
VARIANTS = ("fines", "card", "renewal_limit", "renewal_held", "hold_available", "reference_only")


def generate(rng: random.Random, db: LibraryDB) -> Draft:
    variant = rng.choice(VARIANTS)
    member = pick_member(rng, db)
    who = identity(member, by="email")
    details = ("get_member_details", {"member_id": member.member_id})
    reads: list[tuple[str, dict[str, Any]]] = [who.gold, details]
    if variant in ("fines", "card", "reference_only"):
        if variant == "reference_only":
            specs: list[dict[str, Any]] = [{"reference_only": True}, {"on_loan": True, "not_member": member.member_id}]
        else:
            specs = [{}, {"on_loan": True, "not_member": member.member_id}]
        book = add_book(rng, db, specs)
        if variant == "fines":
            member.fines = rng.choice((10.0, 11.25, 12.75, 14.5, 18.0))
            blocking, why = money(member.fines), "your fines are too high to borrow"
        elif variant == "card":
            member.card_status = rng.choice(("expired", "suspended"))
            blocking, why = member.card_status, f"your card is {member.card_status}"
        else:
            blocking, why = "reference", "the only copy in is reference-only"
        kind, text = "check_out", f"I'd like to borrow {quote(book.title)}."
        match = [[title_key(book.title)]]
        reads += [("search_catalog", {"query": book.title}), ("get_book_copies", {"book_id": book.book_id})]
    elif variant in ("renewal_limit", "renewal_held"):
        renewals = 2 if variant == "renewal_limit" else rng.randint(0, 1)
        book = add_book(rng, db, [{"borrower": member.member_id, "due_in": rng.randint(1, 9), "renewals": renewals}])
        if variant == "renewal_held":
            waiting = other_member(rng, db, member.member_id)
            db.holds[hold_key(book.book_id, waiting)] = Hold(book_id=book.book_id, member_id=waiting, placed=iso(NOW))
        loan = member_loan(db, member, book)
        blocking = loan.due
        why = "it was renewed twice already" if variant == "renewal_limit" else "another member is waiting for it"
        kind, text = "renew", f"I'd like to renew my loan of {quote(book.title)}."
        match = [[title_key(book.title)], [loan.copy_id.lower()]]
        reads += [("get_book_copies", {"book_id": book.book_id})] if variant == "renewal_held" else []
    else:  # hold_available
        book = add_book(rng, db, [{}, {"on_loan": True, "not_member": member.member_id}])
        shelf = next(c for c in db.book_copies(book.book_id) if c.status == "available")
        blocking, why = shelf.copy_id, f"copy {shelf.copy_id} is on the shelf"
        kind, text = "place_hold", f"Could you put a hold on {quote(book.title)} for me?"
        match = [[title_key(book.title)], [book.book_id.lower()]]
        reads += [("search_catalog", {"query": book.title}), ("get_book_copies", {"book_id": book.book_id})]
    return Draft(
        variant=variant,
        difficulty="medium",
        gold=reads,
        communicate=[blocking],
        script=UserScript(
            opening=f"Hi! {text}{who.opening}",
            facts=who.facts,
            requests=[request(kind, text, match=match, evidence=[blocking])],
        ),
        reason_for_call=f"You came to the desk to ask: {text}",
        known_info=who.known_info,
        unknown_info=who.unknown_info,
        task_instructions="If the librarian refuses and explains why, accept it and do not ask for anything else.",
        purpose="Check the policy's preconditions before a change, and refuse with the reason when they fail.",
        notes={"blocking_rule": variant, "why": why},
    )
