"""Family `lookup_answer` (trivial; tool-calling precision): one catalog lookup, then say the answer.

The member asks who wrote a title, or when it was published. The catalog is public (no identification); the agent
must call `search_catalog` with the title and say the author's full name or the year from the record. No writes: the
DB must be unchanged. This is the shape of the prompt's worked example, so it is the family a weak model can copy
its way through; everything else needs more than copying.
"""

from __future__ import annotations

import random

from trace_rl.envs.library.data_model import LibraryDB
from trace_rl.envs.library.families.common import Draft, quote, request
from trace_rl.envs.library.scenario import UserScript

NAME = "lookup_answer"
CAPABILITY = "tool_calling_precision"
LEVEL = 0  # difficulty rank of the family's easiest variant (0 trivial … 3 hard)
VARIANTS = {"author": 3, "year": 1}


def generate(rng: random.Random, db: LibraryDB) -> Draft:
    variant = rng.choices(list(VARIANTS), weights=list(VARIANTS.values()))[0]
    book = db.books[rng.choice(sorted(db.books))]
    if variant == "author":
        question, answer, what = f"Who wrote {quote(book.title)}?", book.author, "who wrote"
    else:
        question, answer, what = f"What year was {quote(book.title)} published?", str(book.year), "the year of"
    return Draft(
        variant=variant,
        difficulty="trivial",
        gold=[("search_catalog", {"query": book.title})],
        communicate=[answer],
        script=UserScript(opening=question, requests=[request("ask", question, evidence=[answer])]),
        reason_for_call=f"You want to know {what} the book {quote(book.title)}.",
        known_info=f"The title is {quote(book.title)}.",
        unknown_info="You do not know anything else about the book.",
        task_instructions="Ask only this question.",
        purpose="Look a book up in the catalog and answer from the record.",
    )
