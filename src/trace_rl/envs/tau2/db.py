"""Typed τ² databases with cheap per-episode copies and an incremental canonical hash.

A τ² DB is a few top-level tables (`dict[str, Record]`). Every episode copies the pristine DB and every score builds
a second copy for the gold replay, so copying and hashing the 3 MB airline/retail DBs naively (pydantic deep copy +
sorted JSON dump, ~0.5 s each) would dominate. Instead:

- `copy.deepcopy(db)` copies the table dicts only; records stay shared with the source until written. A frozen DB
  (`db.freeze()`: the cached pristine DBs of `data.load_db`) is read-only and becomes the *origin* of its copies.
- Tools mutate a record only through `db.writable(table, key)`, which first gives this DB a private deep copy
  (copy-on-write), and add records with `db.insert(...)`. Shared records are therefore never mutated.
- The hash is a multiset hash: per table, the sum (mod 2**256) over its entries of sha256(key, record digest), where
  a record's digest is the sha256 of its sorted-key JSON dump (canonical form, docs/tau2-fidelity.md §5: null optional
  fields present, floats where float-typed). A copy derives its sums from its origin's (computed once, cached) by
  swapping the entries of its private records, so hashing costs O(records written); a DB without origin (e.g. one
  rebuilt by a task's `initialization_data`) sums every entry, with digests of shared records cached. Two DBs hash
  equal iff their canonical contents are equal (up to sha256 collisions); the value differs from upstream's hash,
  which scoring never compares against.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr

from trace_rl.envs.toolkit import DB

MOD = 1 << 256


class Tau2Record(BaseModel):
    """A nested record: unknown keys are dropped (as upstream), dumps never warn about raw-assigned values."""

    model_config = ConfigDict(extra="ignore")

    _digest: str | None = PrivateAttr(default=None)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        # Some tools store arguments raw (e.g. airline bag counts); pydantic would warn on every dump of those.
        kwargs.setdefault("warnings", False)
        return super().model_dump(**kwargs)


def record_digest(record: Any, *, cache: bool) -> str:
    """sha256 of the record's canonical JSON; cached on shared (never mutated) records only."""
    private = getattr(record, "__pydantic_private__", None) if cache else None
    if private is not None and private.get("_digest") is not None:
        return private["_digest"]
    dumped = record.model_dump(mode="python") if isinstance(record, BaseModel) else record
    digest = hashlib.sha256(json.dumps(dumped, sort_keys=True, default=str).encode()).hexdigest()
    if private is not None:
        private["_digest"] = digest
    return digest


def _entry(key: str, record: Any, *, cache: bool) -> int:
    line = f"{key}\0{record_digest(record, cache=cache)}".encode()
    return int.from_bytes(hashlib.sha256(line).digest(), "big")


class Tau2DB(DB):
    """Top-level tables of records; copy-on-write per episode (see module docstring)."""

    TABLES: ClassVar[tuple[str, ...]] = ()

    _owned: set[tuple[str, str]] = PrivateAttr(default_factory=set)
    _origin: Tau2DB | None = PrivateAttr(default=None)
    _read_only: bool = PrivateAttr(default=False)
    _sums: dict[str, tuple[int, int]] | None = PrivateAttr(default=None)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        kwargs.setdefault("warnings", False)
        return super().model_dump(**kwargs)

    @classmethod
    def tables(cls) -> tuple[str, ...]:
        return cls.TABLES or tuple(cls.model_fields)

    def table(self, name: str) -> dict[str, Any]:
        return getattr(self, name)

    # -- copy-on-write ------------------------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Tau2DB:
        new = type(self).model_construct(**{name: dict(self.table(name)) for name in self.tables()})
        owned = set(self._owned)
        for name, key in owned:
            table = new.table(name)
            if key in table:
                table[key] = copy.deepcopy(table[key])
        new._owned = owned
        new._origin = self if self._read_only else self._origin
        return new

    def freeze(self) -> Tau2DB:
        """Make this DB read-only (it must have no private records); its copies then hash incrementally against it."""
        if self._owned:
            raise RuntimeError("only a DB without written records can be frozen")
        self._read_only = True
        return self

    def _check_writable(self) -> None:
        if self._read_only:
            raise RuntimeError("this τ² DB is frozen (a pristine DB shared by episodes) and must not be modified")

    def writable(self, table: str, key: str) -> Any:
        """The record under `key`, private to this DB, safe to mutate (KeyError if absent)."""
        records = self.table(table)
        if (table, key) not in self._owned:
            self._check_writable()
            shared = records[key]  # validated and never raw-assigned (only private records are): a dump round trip
            records[key] = type(shared).model_validate(shared.model_dump(mode="python"))  # is 2x faster than deepcopy
            self._owned.add((table, key))
            self._sums = None
        return records[key]

    def insert(self, table: str, key: str, record: BaseModel) -> None:
        self._check_writable()
        self.table(table)[key] = record
        self._owned.add((table, key))
        self._sums = None

    # -- hashing ------------------------------------------------------------------------------------------------
    def table_sums(self) -> dict[str, tuple[int, int]]:
        """Per table: (multiset sum of entry hashes, number of entries)."""
        origin = self._origin
        if origin is None:
            if self._sums is not None and not self._owned:
                return self._sums
            sums = {}
            for name in self.tables():
                total = 0
                for key, record in self.table(name).items():
                    total += _entry(key, record, cache=(name, key) not in self._owned)
                sums[name] = (total % MOD, len(self.table(name)))
            if not self._owned:
                self._sums = sums
            return sums
        sums = dict(origin.table_sums())
        for name, key in self._owned:
            total, count = sums[name]
            before = origin.table(name).get(key)
            if before is not None:
                total -= _entry(key, before, cache=True)
                count -= 1
            after = self.table(name).get(key)
            if after is not None:
                total += _entry(key, after, cache=False)
                count += 1
            sums[name] = (total % MOD, count)
        return sums

    def get_hash(self) -> str:
        sums = self.table_sums()
        text = "\n".join(f"{name}:{count}:{total:064x}" for name, (total, count) in sums.items())
        return hashlib.sha256(text.encode()).hexdigest()

    def full_hash(self) -> str:
        """sha256 of the whole canonical JSON: slow and cache-free; used to check pristine DBs stay untouched."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()
