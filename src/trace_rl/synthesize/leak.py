"""The automatic leak check of the synthesize stage (docs/method-notes.md §6.1): nothing of the target's test split may
appear in a generated spec, generator code, prompt, hint or task.

`build_index(domain)` collects from the test split: task ids; entity ids named in gold actions or instructions (order,
user, reservation, member and payment-method ids, emails); member/user names (from lookups, scripts, instructions,
and the DB records those ids point at); and 8-word instruction phrases that no train instruction shares (train-shared
phrases are templates, not test content; a domain with a task generator adds a sample of its fresh tasks,
`template_sample()`, so a template the train split happens not to fill the same way is not taken for a leak). It
also returns the plain test entities (user, order, reservation ids) so the τ² variant generator and the author API
can leave them out. `check(...)` scans artifacts and returns a report
that is written to `envs/<capability>/leak.json`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.base import Domain
from trace_rl.envs.synthetic.leak_guard import PHRASE_N, Hit, LeakIndex, shingles, task_leaks, tokens
from trace_rl.types import Task

ID_KEYS = ("order_id", "user_id", "reservation_id", "email", "member_id", "payment_method_id")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
_ORDER = re.compile(r"#W\d{5,}")
_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,}\b")
_NAME_CUES = re.compile(r"(?:You are|Your name is|name is|I am|I'm)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+){1,2})")


@dataclass
class TestEntities:
    """Plain test-split entity ids, for exclusion (never written into an environment folder)."""

    users: set[str] = field(default_factory=set)
    orders: set[str] = field(default_factory=set)
    reservations: set[str] = field(default_factory=set)

    def as_exclude(self) -> dict[str, list[str]]:
        return {"users": sorted(self.users), "orders": sorted(self.orders), "reservations": sorted(self.reservations)}


def _texts(task: Task) -> list[str]:
    out: list[str] = []
    scenario = task.user_scenario
    if isinstance(scenario, str):
        out.append(scenario)
    elif isinstance(scenario, dict):
        instructions = scenario.get("instructions")
        if isinstance(instructions, dict):
            out += [str(v) for v in instructions.values() if v]
        elif instructions:
            out.append(str(instructions))
        if scenario.get("persona"):
            out.append(str(scenario["persona"]))
    script = task.metadata.get("user_script")
    if isinstance(script, dict):
        out.append(str(script.get("opening") or ""))
        out += [str(r.get("text") or "") for r in script.get("requests") or [] if isinstance(r, dict)]
    if task.ticket:
        out.append(task.ticket)
    return [t for t in out if t]


def _db(domain: Domain) -> dict[str, Any]:
    try:
        env = domain.make_env()
        db = env.tools.db  # type: ignore[attr-defined]
        return db.model_dump(mode="json") if db is not None else {}
    except Exception:
        return {}


def _user_name(record: dict[str, Any]) -> str | None:
    name = record.get("name")
    if isinstance(name, dict) and name.get("first_name"):
        return f"{name['first_name']} {name.get('last_name', '')}".strip()
    if record.get("first_name"):
        return f"{record['first_name']} {record.get('last_name', '')}".strip()
    return None


def build_index(
    domain: Domain, *, test_split: str = "test", train_split: str = "train"
) -> tuple[LeakIndex, TestEntities]:
    index = LeakIndex()
    entities = TestEntities()
    if test_split not in domain.splits():
        return index.finalize(), entities
    test = domain.tasks(test_split)
    train = domain.tasks(train_split) if train_split in domain.splits() else []
    db = _db(domain) if not str(getattr(domain, "name", "")).startswith("library") else {}
    users = db.get("users") if isinstance(db.get("users"), dict) else {}
    emails = {str(u.get("email", "")).lower(): uid for uid, u in users.items() if isinstance(u, dict)}
    train_shingles: set[str] = set()
    sample = getattr(domain, "template_sample", None)  # a task generator's own output: its phrases are templates
    for task in [*train, *(sample() if callable(sample) else [])]:
        for text in _texts(task):
            train_shingles.update(shingles(tokens(text), PHRASE_N))
    for task in test:
        index.add("task_id", task.id)
        names: set[str] = set()
        for action in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
            args = action.arguments
            for key in ID_KEYS:
                if isinstance(args.get(key), str):
                    index.add("id", args[key])
            if args.get("first_name") and args.get("last_name"):
                names.add(f"{args['first_name']} {args['last_name']}")
            if isinstance(args.get("user_id"), str):
                entities.users.add(args["user_id"])
            if isinstance(args.get("email"), str) and args["email"].lower() in emails:
                entities.users.add(emails[args["email"].lower()])
            if isinstance(args.get("order_id"), str):
                entities.orders.add(args["order_id"])
            if isinstance(args.get("reservation_id"), str):
                entities.reservations.add(args["reservation_id"])
        script = task.metadata.get("user_script")
        facts = script.get("facts") if isinstance(script, dict) else None
        if isinstance(facts, dict):
            if facts.get("first_name"):
                names.add(f"{facts['first_name']} {facts.get('last_name', '')}")
            if facts.get("email"):
                index.add("id", str(facts["email"]))
        for text in _texts(task):
            for email in _EMAIL.findall(text):
                index.add("id", email)
                if email.lower() in emails:
                    entities.users.add(emails[email.lower()])
            for order in _ORDER.findall(text):
                index.add("id", order)
                entities.orders.add(order)
            for uid in _USER_ID.findall(text):
                if uid in users:
                    index.add("id", uid)
                    entities.users.add(uid)
            names.update(_NAME_CUES.findall(text))
            for s in shingles(tokens(text), PHRASE_N):
                if s not in train_shingles:
                    index.add("phrase", s)
        for uid in list(entities.users):
            record = users.get(uid)
            if isinstance(record, dict):
                name = _user_name(record)
                if name:
                    names.add(name)
                if record.get("email"):
                    index.add("id", str(record["email"]))
        for name in names:
            index.add("name", name)
    for uid in entities.users:
        index.add("id", uid)
    for oid in entities.orders | entities.reservations:
        index.add("id", oid)
    return index.finalize(), entities


@dataclass
class LeakReport:
    ok: bool = True
    checked: dict[str, int] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    index_counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "hits": [h.as_dict() for h in self.hits],
            "index_counts": self.index_counts,
        }


def check(index: LeakIndex, texts: dict[str, str], tasks: list[Task], task_ids: list[str] | None = None) -> LeakReport:
    """Scan named texts (spec, code, prompts, hint) and tasks; `task_ids` are structured references (evidence)."""
    report = LeakReport(index_counts=dict(index.counts))
    for where, text in texts.items():
        report.checked[where] = len(text)
        report.hits += index.check_text(text, where)
    for task in tasks:
        report.hits += task_leaks(index, task)
    report.checked["tasks"] = len(tasks)
    if task_ids:
        report.hits += index.check_task_ids(task_ids, "evidence task ids")
        report.checked["evidence task ids"] = len(task_ids)
    report.ok = not report.hits
    return report


__all__ = ["LeakReport", "TestEntities", "build_index", "check"]
