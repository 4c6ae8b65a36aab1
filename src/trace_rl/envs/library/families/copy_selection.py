"""Family `copy_selection` (medium–hard; structured data reasoning): the member wants a particular kind of copy, and
the agent must read the book's copy records and lend the one copy that meets every constraint.

Variants: a format ("large print", "audiobook", ...; medium), or a language and "the newest edition you can lend"
(hard). Distractors: a matching copy already on loan, a matching reference-only copy, copies of another format or
language, older editions. Loan periods differ by format, so the due date the agent must say depends on the copy
lent. The copy listing always starts with an available copy that does not fit, so lending the first copy on the
shelf never passes.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from trace_rl.envs.library.data_model import LibraryDB
from trace_rl.envs.library.families.common import Draft, add_book, identity, pick_member, quote, request, title_key
from trace_rl.envs.library.scenario import UserScript
from trace_rl.envs.library.world import FORMATS, LOAN_DAYS, NOW, iso

NAME = "copy_selection"
CAPABILITY = "structured_data_reasoning"
LEVEL = 2  # difficulty rank of the family's easiest variant (0 trivial … 3 hard)
VARIANTS = {"format": 3, "language_newest": 2}


def _format_specs(rng: random.Random, member_id: str) -> tuple[list[dict[str, Any]], str, str]:
    fmt = rng.choice(("large print", "audiobook", "hardcover", "paperback"))
    other = [f for f in FORMATS if f != fmt]
    specs: list[dict[str, Any]] = [
        {"format": fmt, "target": True},
        {"format": fmt, "on_loan": True, "not_member": member_id},
        {"format": rng.choice(other)},
    ]
    if rng.random() < 0.5:
        specs.append({"format": fmt, "reference_only": True})
    return specs, fmt, f"I'd like to borrow the {fmt} copy of {{title}}."


def _language_specs(rng: random.Random, member_id: str) -> tuple[list[dict[str, Any]], str, str]:
    lang = rng.choice(("Spanish", "French"))
    newest = rng.randint(2012, 2020)
    fmt = rng.choice(FORMATS)
    specs: list[dict[str, Any]] = [
        {"language": lang, "edition": newest, "format": fmt, "target": True},
        {"language": lang, "edition": newest - rng.randint(3, 9)},
        {"language": lang, "edition": newest + rng.randint(1, 3), "on_loan": True, "not_member": member_id},
        {"language": "English", "edition": newest + rng.randint(1, 4)},
    ]
    if rng.random() < 0.5:
        specs.append({"language": lang, "edition": 2024, "reference_only": True})
    return specs, lang, f"I'd like to borrow {{title}} in {lang}, the newest edition you can lend me."


def lead_with(db: LibraryDB, book_id: str, first: str) -> None:
    """Relabel the book's copies so that `first` (an available distractor) has the lowest id and is listed first:
    "lend the first copy on the shelf" must never pass."""
    old = [c.copy_id for c in db.book_copies(book_id)]
    order = [first, *[c for c in old if c != first]]
    mapping = dict(zip(order, sorted(old), strict=True))
    copies = {o: db.copies.pop(o) for o in order}
    loans = {o: db.loans.pop(o) for o in order if o in db.loans}
    for o, copy in copies.items():
        copy.copy_id = mapping[o]
        db.copies[copy.copy_id] = copy
    for o, loan in loans.items():
        loan.copy_id = mapping[o]
        db.loans[loan.copy_id] = loan


def generate(rng: random.Random, db: LibraryDB) -> Draft:
    variant = rng.choices(list(VARIANTS), weights=list(VARIANTS.values()))[0]
    member = pick_member(rng, db)
    who = identity(member, by="email")
    maker = _format_specs if variant == "format" else _language_specs
    specs, wanted, text_tpl = maker(rng, member.member_id)
    rng.shuffle(specs)
    target_index = next(i for i, s in enumerate(specs) if s.pop("target", False))
    book = add_book(rng, db, specs)
    target = [c for c in db.copies.values() if c.book_id == book.book_id][target_index]  # insertion = spec order
    shelf = sorted(c.copy_id for c in db.book_copies(book.book_id) if c.status == "available" and c is not target)
    lead_with(db, book.book_id, rng.choice(shelf))
    due = iso(NOW + timedelta(days=LOAN_DAYS[target.format]))
    text = text_tpl.format(title=quote(book.title))
    match = [[target.copy_id.lower()], [title_key(book.title), wanted.lower()]]
    return Draft(
        variant=variant,
        difficulty="medium" if variant == "format" else "hard",
        gold=[
            who.gold,
            ("get_member_details", {"member_id": member.member_id}),
            ("search_catalog", {"query": book.title}),
            ("get_book_copies", {"book_id": book.book_id}),
            ("check_out", {"member_id": member.member_id, "copy_id": target.copy_id}),
        ],
        communicate=[due],
        script=UserScript(
            opening=f"Hi! {text}{who.opening}",
            facts={**who.facts, "preference": text},
            requests=[request("check_out", text, match=match, evidence=[due])],
        ),
        reason_for_call=f"You want to borrow a copy of {quote(book.title)}. Your wish, in your words: {text}",
        known_info=who.known_info,
        unknown_info=who.unknown_info + " You do not know which copies the library has.",
        task_instructions="Agree only to borrowing a copy that meets your wish. Ask when it is due back.",
        purpose="Read a book's copy records and lend the one copy that meets every constraint.",
        notes={"target_copy": target.copy_id},
    )
