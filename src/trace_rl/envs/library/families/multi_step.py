"""Family `multi_step` (medium–hard; multi-step task completion): the member asks for two or three changes in one
conversation, and every one must be made (the DB must equal the gold DB after all of them) and every result said.

The requests are drawn from the single-write makers of `authenticated_write` (renew, pay part of the fines, cancel a
hold, place a hold, return an overdue copy); returns and payments are not combined, so the fines left do not depend
on the order of the writes. Two writes: medium; three: hard.
"""

from __future__ import annotations

import random

from trace_rl.envs.library.data_model import LibraryDB
from trace_rl.envs.library.families.authenticated_write import MAKERS, Write
from trace_rl.envs.library.families.common import Draft, identity, pick_member
from trace_rl.envs.library.scenario import UserScript

NAME = "multi_step"
CAPABILITY = "multi_step_completion"
LEVEL = 2  # difficulty rank of the family's easiest variant (0 trivial … 3 hard)


def pick_kinds(rng: random.Random) -> list[str]:
    while True:
        kinds = rng.sample(sorted(MAKERS), rng.choice((2, 2, 3)))
        if not {"pay_fine", "return"} <= set(kinds):
            return kinds


def generate(rng: random.Random, db: LibraryDB) -> Draft:
    member = pick_member(rng, db)
    who = identity(member, by="email")
    kinds = pick_kinds(rng)
    writes: list[Write] = [MAKERS[k](rng, db, member) for k in kinds]
    gold = [who.gold, ("get_member_details", {"member_id": member.member_id})]
    for write in writes:
        gold += write.gold
    asks = " Also, ".join(
        w.request.text[0].lower() + w.request.text[1:] if i else w.request.text for i, w in enumerate(writes)
    )
    opening = f"Hi!{who.opening} I have {len(writes)} things today. {asks}"
    return Draft(
        variant="+".join(kinds),
        difficulty="medium" if len(writes) == 2 else "hard",
        gold=gold,
        communicate=[c for w in writes for c in w.communicate],
        script=UserScript(opening=opening, facts=who.facts, requests=[w.request for w in writes], max_replies=14),
        reason_for_call=" ".join(w.reason for w in writes) + " You ask for all of them in your first message.",
        known_info=who.known_info,
        unknown_info=who.unknown_info,
        task_instructions="Make sure every one of your requests is handled before you leave; remind the librarian "
        "of any that are forgotten. Agree only to exactly these changes.",
        purpose="Complete every requested change in one conversation.",
    )
