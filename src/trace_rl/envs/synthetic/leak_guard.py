"""Test-split leak guard: hashed identifiers, names and phrases of the target's test split (docs/method-notes.md §6.1).

A `LeakIndex` holds sha256 fingerprints (never the plain strings) of the test split's task ids, entity ids
(order, user, reservation, member and payment ids, emails), member/user names and 8-word instruction phrases (those
not also found in train instructions). Text is checked by hashing its tokens, 2- and 3-grams and 8-grams. The index
is stored with an environment (`leak_index.json`) so `make_task` can refuse a leaking task at any seed, and the
synthesize stage uses the same check on specs, code, prompts and sampled tasks.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.store import atomic_write_json, read_json

PHRASE_N = 8
_TOKEN = re.compile(r"[#@\w.\-']+")
KINDS = ("task_id", "id", "name", "phrase")


def fingerprint(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}:{value.strip().lower()}".encode()).hexdigest()[:20]


def tokens(text: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(text.lower()):
        tok = tok.strip(".-'")
        if tok:
            out.append(tok)
    return out


def shingles(words: list[str], n: int) -> Iterable[str]:
    for i in range(len(words) - n + 1):
        yield " ".join(words[i : i + n])


@dataclass
class Hit:
    where: str
    kind: str
    masked: str

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "kind": self.kind, "value": self.masked}


def mask(value: str) -> str:
    return f"{value[:2]}…({fingerprint('mask', value)[:8]})"


@dataclass
class LeakIndex:
    """Fingerprints per kind, plus fingerprints of the first word of every name and phrase (`heads`), so checking
    a text hashes only the n-grams that could match."""

    prints: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KINDS})
    heads: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, value: str) -> None:
        value = " ".join(tokens(value)) if kind in ("name", "phrase") else value.strip().lower()
        if value:
            self.prints[kind].add(fingerprint(kind, value))
            if kind in ("name", "phrase"):
                self.heads.add(fingerprint("head", value.split(" ")[0]))

    def finalize(self) -> LeakIndex:
        self.counts = {k: len(v) for k, v in self.prints.items()}
        return self

    def __bool__(self) -> bool:
        return any(self.prints.values())

    # -- checking --------------------------------------------------------------------------------------------------
    def check_text(self, text: str, where: str) -> list[Hit]:
        words = tokens(text)
        hits: list[Hit] = []
        seen: set[tuple[str, str]] = set()
        head_memo: dict[str, bool] = {}

        def probe(kind: str, value: str) -> None:
            if (kind, value) not in seen and fingerprint(kind, value) in self.prints[kind]:
                seen.add((kind, value))
                hits.append(Hit(where, kind, mask(value)))

        def is_head(word: str) -> bool:
            if word not in head_memo:
                head_memo[word] = fingerprint("head", word) in self.heads
            return head_memo[word]

        ids = self.prints["id"]
        for w in set(words):
            if ids and any(c.isdigit() or c in "@#" for c in w):
                probe("id", w)
                if w.startswith("#"):
                    probe("id", w[1:])
        for i, w in enumerate(words):
            if not is_head(w):
                continue
            for n in (2, 3):
                if i + n <= len(words):
                    probe("name", " ".join(words[i : i + n]))
            if i + PHRASE_N <= len(words):
                probe("phrase", " ".join(words[i : i + PHRASE_N]))
        return hits

    def check_task_ids(self, ids: Iterable[str], where: str) -> list[Hit]:
        return [Hit(where, "task_id", mask(i)) for i in ids if fingerprint("task_id", str(i)) in self.prints["task_id"]]

    # -- storage ---------------------------------------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        return {
            "format": "trace-rl/leak-index@1",
            "hash": "sha256('<kind>:<lowercase value>')[:20]",
            "phrase_words": PHRASE_N,
            "counts": {k: len(v) for k, v in self.prints.items()},
            "prints": {k: sorted(v) for k, v in self.prints.items()},
            "heads": sorted(self.heads),
        }

    def save(self, folder: Path) -> None:
        atomic_write_json(EnvLayout(folder).leak_index, self.as_json(), indent=None)

    @classmethod
    def load(cls, folder: Path) -> LeakIndex | None:
        path = EnvLayout(folder).leak_index
        if not path.exists():
            return None
        data = read_json(path)
        index = cls({k: set(data.get("prints", {}).get(k, [])) for k in KINDS}, set(data.get("heads", [])))
        return index.finalize()


def task_text(task: Any) -> str:
    """The text of a task that could carry a leak: everything but the initial-state DB patch's untouched records."""
    data = task.model_dump(mode="json")
    return _flatten(data)


def _flatten(value: Any) -> str:
    if isinstance(value, dict):
        return " \n ".join(f"{k}: {_flatten(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " \n ".join(_flatten(v) for v in value)
    return "" if value is None else str(value)


def task_leaks(index: LeakIndex, task: Any) -> list[Hit]:
    hits = index.check_text(task_text(task), f"task {task.id}")
    source = task.metadata.get("source_task_id") if hasattr(task, "metadata") else None
    if source is not None:
        hits += index.check_task_ids([str(source)], f"task {task.id} source")
    return hits


__all__ = ["Hit", "LeakIndex", "fingerprint", "task_leaks", "task_text", "tokens"]
