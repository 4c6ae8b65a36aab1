"""The seeded world generator: a small public library at a fixed date.

`generate_world(seed)` builds six members, eight books with three or four copies each (formats, editions, languages,
some reference-only), active loans (some renewed, some overdue) and a few holds. The same seed gives the same world,
byte for byte (`world_json(seed)`); `world(seed)` caches it. Worlds are small on purpose: tool results must stay short
for small-context models.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from functools import lru_cache

from trace_rl.envs.library.data_model import Book, Copy, Hold, LibraryDB, Loan, Member, hold_key

NOW = date(2025, 3, 14)
FORMATS = ("paperback", "hardcover", "large print", "audiobook")
LOAN_DAYS = {"paperback": 21, "hardcover": 21, "large print": 28, "audiobook": 14}
LANGUAGES = ("English", "Spanish", "French")
FINE_LIMIT = 10.0
LATE_FEE_PER_DAY = 0.25

N_MEMBERS = 6
N_BOOKS = 8

FIRST_NAMES = (
    "Ada", "Bilal", "Carmen", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ines", "Jonas", "Keiko", "Luca", "Maren",
    "Nadia", "Omar", "Petra", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Viktor", "Wren", "Yara", "Zoe", "Arjun",
    "Beatriz", "Colm", "Dalia", "Emeka", "Freya", "Gideon", "Hugo", "Ilse", "Jamal", "Kira", "Leon", "Mina", "Nils",
    "Olga",
)  # fmt: skip  # word list: packed, not one per line
LAST_NAMES = (
    "Abbott", "Baptiste", "Castell", "Dunmore", "Eriksen", "Fenwick", "Galloway", "Hartley", "Ibarra", "Jovanovic",
    "Kowalski", "Lindqvist", "Moreau", "Nakamura", "Okonkwo", "Pereira", "Quinlan", "Rahman", "Sorensen", "Thorne",
    "Umarov", "Valdez", "Whitlock", "Yilmaz", "Zamora", "Achebe", "Brennan", "Costa", "Delacroix", "Ekwueme",
    "Faulkner", "Grieve", "Haddad", "Iwasaki", "Jensen", "Kaur", "Lozano", "Mbeki", "Novak", "Ortiz",
)  # fmt: skip  # word list: packed, not one per line
EMAIL_DOMAINS = ("mail.com", "post.net", "inbox.org", "letterbox.io")
TITLE_ADJECTIVES = (
    "Silent", "Copper", "Hidden", "Last", "Northern", "Paper", "Quiet", "Salt", "Winter", "Glass", "Golden", "Broken",
    "Wandering", "Distant", "Amber", "Hollow", "Iron", "Lantern", "Midnight", "Painted",
)  # fmt: skip  # word list: packed, not one per line
TITLE_NOUNS = (
    "Orchard", "River", "Lighthouse", "Garden", "Atlas", "Harbor", "Mountain", "Bridge", "Archive", "Meadow", "Compass",
    "Forest", "Island", "Station", "Kingdom", "Window", "Road", "Tide", "Valley", "Clockmaker",
)  # fmt: skip  # word list: packed, not one per line
TITLE_PLACES = ("Ashmoor", "Kelby", "Larkspur", "Tollan", "Vire", "Brackenfield", "Osterby", "Wyn", "Calder", "Marrow")
TITLE_PATTERNS = ("The {adj} {noun}", "{adj} {noun}", "The {noun} of {place}", "{noun} of {place}")
RESERVED_TITLES = frozenset({"Night Harbor"})  # used by the agent prompt's worked example


def iso(d: date) -> str:
    return d.isoformat()


def parse_date(s: str) -> date:
    return date.fromisoformat(s)


def money(amount: float) -> str:
    """Dollars as the tools print them: two decimals, no sign or currency symbol."""
    return f"{amount:.2f}"


def unique_id(rng: random.Random, prefix: str, low: int, high: int, taken: set[str]) -> str:
    """A fresh `<prefix><number>` id not in `taken` (which it updates)."""
    while True:
        candidate = f"{prefix}{rng.randint(low, high)}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def new_title(rng: random.Random, taken: set[str]) -> str:
    while True:
        pattern = rng.choice(TITLE_PATTERNS)
        title = pattern.format(
            adj=rng.choice(TITLE_ADJECTIVES), noun=rng.choice(TITLE_NOUNS), place=rng.choice(TITLE_PLACES)
        )
        if title not in taken and title not in RESERVED_TITLES:
            taken.add(title)
            return title


def new_person(rng: random.Random, taken_names: set[str]) -> tuple[str, str]:
    while True:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        if f"{first} {last}" not in taken_names:
            taken_names.add(f"{first} {last}")
            return first, last


def taken_ids(db: LibraryDB) -> set[str]:
    """Every id in use (members, books, copies), for generating fresh ones."""
    return set(db.members) | set(db.books) | set(db.copies)


def _make_members(rng: random.Random, taken: set[str], names: set[str]) -> dict[str, Member]:
    members: dict[str, Member] = {}
    for _ in range(N_MEMBERS):
        first, last = new_person(rng, names)
        member_id = unique_id(rng, "M", 1000, 9999, taken)
        email = f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@{rng.choice(EMAIL_DOMAINS)}"
        members[member_id] = Member(
            member_id=member_id,
            first_name=first,
            last_name=last,
            email=email,
            postcode=str(rng.randint(10000, 99999)),
            card_status=rng.choices(("active", "expired", "suspended"), weights=(17, 2, 1))[0],
            fines=rng.choice((0.0, 0.0, 0.0, 0.5, 1.25, 2.0, 3.5, 4.75)),
        )
    return members


def _make_catalog(rng: random.Random, taken: set[str], names: set[str]) -> tuple[dict[str, Book], dict[str, Copy]]:
    books: dict[str, Book] = {}
    copies: dict[str, Copy] = {}
    titles: set[str] = set()
    for _ in range(N_BOOKS):
        book_id = unique_id(rng, "B", 100, 999, taken)
        first, last = new_person(rng, names)
        year = rng.randint(1955, 2022)
        books[book_id] = Book(book_id=book_id, title=new_title(rng, titles), author=f"{first} {last}", year=year)
        for _ in range(rng.randint(3, 4)):
            fmt = rng.choices(FORMATS, weights=(5, 3, 1, 1))[0]
            copy_id = unique_id(rng, "C", 1000, 9999, taken)
            copies[copy_id] = Copy(
                copy_id=copy_id,
                book_id=book_id,
                format=fmt,
                edition=rng.randint(year, 2024),
                language=rng.choices(LANGUAGES, weights=(8, 1, 1))[0],
                reference_only=rng.random() < 0.08,
                loan_days=LOAN_DAYS[fmt],
                status="available",
            )
    return books, copies


def _make_loans(rng: random.Random, members: dict[str, Member], copies: dict[str, Copy]) -> dict[str, Loan]:
    loans: dict[str, Loan] = {}
    lendable = sorted(c.copy_id for c in copies.values() if not c.reference_only)
    for member_id in sorted(members):
        for copy_id in rng.sample(lendable, rng.randint(0, 3)):
            if copy_id in loans:
                continue
            copy = copies[copy_id]
            renewals = rng.choices((0, 1, 2), weights=(6, 3, 1))[0]
            checked_out = NOW - timedelta(days=rng.randint(1, 20) + copy.loan_days * renewals)
            due = checked_out + timedelta(days=copy.loan_days * (renewals + 1))
            loans[copy_id] = Loan(
                copy_id=copy_id, member_id=member_id, checked_out=iso(checked_out), due=iso(due), renewals=renewals
            )
            copy.status = "on loan"
    return loans


def _make_holds(
    rng: random.Random,
    members: dict[str, Member],
    books: dict[str, Book],
    loans: dict[str, Loan],
    copies: dict[str, Copy],
) -> dict[str, Hold]:
    holds: dict[str, Hold] = {}
    for _ in range(rng.randint(1, 3)):
        book_id = rng.choice(sorted(books))
        member_id = rng.choice(sorted(members))
        borrowing = any(loans[c].member_id == member_id for c in loans if copies[c].book_id == book_id)
        if borrowing or hold_key(book_id, member_id) in holds:
            continue
        placed = NOW - timedelta(days=rng.randint(1, 30))
        holds[hold_key(book_id, member_id)] = Hold(book_id=book_id, member_id=member_id, placed=iso(placed))
    return holds


def generate_world(seed: int) -> LibraryDB:
    """A new library world for `seed` (not cached: callers may mutate it)."""
    rng = random.Random(f"trace-rl/library/world/{seed}")
    taken: set[str] = set()
    names: set[str] = set()
    members = _make_members(rng, taken, names)
    books, copies = _make_catalog(rng, taken, names)
    loans = _make_loans(rng, members, copies)
    holds = _make_holds(rng, members, books, loans, copies)
    return LibraryDB(now=iso(NOW), members=members, books=books, copies=copies, loans=loans, holds=holds)


@lru_cache(maxsize=512)
def world(seed: int) -> LibraryDB:
    """The cached world of `seed`. Treat it as read-only: environments deep-copy it per episode."""
    return generate_world(seed)


def world_json(seed: int) -> str:
    """The canonical JSON of a world (sorted keys): the byte-for-byte determinism contract."""
    return generate_world(seed).canonical_json()
