"""Cause lenses of the structural analyzer: why a trajectory leaves its reference, beyond where (structural.py).

Our own rules, written against real τ²-bench failures (docs/real-runs.md), not from the TRACE paper, which leaves
the analysis to an LLM. Each lens reads the trajectory, its task and the agent's calls and returns findings for one
capability; structural.py decides which lens explains a deficit it located.

- Policy lens (`policy_rule_application`): the agent refused or handed off to a human (a `transfer_to_human*` call,
  or a reply that declines: "cannot be modified", "not eligible", ...) where the reference makes a state change.
- Claims (`claim_verification`): a user message asserts a value of a record field (a membership tier, a cabin) that
  the records the agent read contradict, and the agent then made a change the reference does not make.
- Elicitation (`information_elicitation`): a required argument holds a value the user never stated although the
  user's scenario (unseen by the agent) states a preference for it ("you prefer gift card payment"): the agent
  never asked; or the agent asked the user for a personal detail (date of birth, email, address) that a record it
  had read already holds.
- Arithmetic (`numerical_reasoning`): a numeric argument of a required change differs from the reference (a count,
  an amount); a change charged an amount (the new `payment_history` entry of the changed record) that the agent's
  confirmation never stated while it stated others; or a number the user had to be told is missing from replies
  that state other amounts.
- The user, not the agent: a simulated user who confirms a change and ends the conversation in the same message
  (`###STOP###`), or leaves it as out of scope, before the reference's change could be made. Such a trajectory's
  missing changes are attributed to the user (`user_fault`), not to an agent capability.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from trace_rl.types import Message, Task, Trajectory

POLICY = "policy_rule_application"
CLAIMS = "claim_verification"
ELICIT = "information_elicitation"
NUMERIC = "numerical_reasoning"

CAUSE_DEFINITIONS: dict[str, str] = {
    POLICY: (
        "The agent applies the policy's rules as written to the records in front of it: it carries out a request the "
        "policy permits instead of refusing it or handing the user to a human, and does not invent restrictions. "
        "Lacking when the agent refuses or transfers and a required state change is never made, or when it first "
        "declines a permitted request and complies only after the user insists."
    ),
    CLAIMS: (
        "The agent checks what the user asserts against the records before acting on it. Lacking when a user claim "
        "that the records contradict (a membership tier, a cabin, a status) is followed by a state change the "
        "correct solution does not make."
    ),
    ELICIT: (
        "The agent asks the user for what only the user can decide (a payment method, a cabin, a preference among "
        "options) before acting, and does not ask for what the records already hold. Lacking when a required "
        "argument takes a value the user never stated although the user had a preference, or when the agent asks "
        "for a personal detail a record it read already shows."
    ),
    NUMERIC: (
        "The agent computes counts and amounts correctly from the records and the policy (totals, fare differences, "
        "refunds, bag counts, payment splits) and states the amount it will charge. Lacking when a numeric argument "
        "of a required change is miscomputed, a charge differs from the amount the agent confirmed, or a figure the "
        "user needed is misstated."
    ),
}
CAUSE_CAPABILITIES: tuple[str, ...] = (POLICY, CLAIMS, ELICIT, NUMERIC)

_REFUSAL = re.compile(
    r"\b(?:i (?:cannot|can't|can ?not|am unable to|'m unable to|am not able to|won't be able to)\b"
    r"|(?:is|are|isn't|aren't) not (?:eligible|allowed|permitted|possible)"
    r"|(?:isn't|aren't|is not|are not) eligible|not (?:eligible|permitted) for"
    r"|(?:doesn't|does not|don't|do not) (?:qualify|meet the)"
    r"|cannot be (?:modified|cancell?ed|changed|refunded|processed|upgraded|downgraded|removed)"
    r"|(?:policy|policies) (?:prohibit|do(?:es)? not (?:allow|permit))"
    r"|unable to (?:process|proceed|cancel|modify|change|upgrade))",
    re.IGNORECASE,
)
_AFFIRM = re.compile(r"\b(?:yes|proceed|go ahead|confirm|please do|book it|sounds good|that works)\b", re.IGNORECASE)
_MONEY = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")
_RECORD_FIELDS = {  # record key -> how an agent asks for it
    "dob": ("date of birth", "birth date", "birthday", "dob"),
    "email": ("email",),
    "address": ("address",),
}
_CLAIM_KEYS = {"membership": ("member",)}  # a request ("change to business class") is not a claim: tiers only


def is_transfer(name: str) -> bool:
    return name.lower().startswith("transfer")


def refusals(trajectory: Trajectory) -> list[tuple[int, str]]:
    """(message index, the declining sentence) for each assistant reply that declines a request."""
    out = []
    for i, m in enumerate(trajectory.messages):
        if m.role == "assistant" and m.content:
            hit = _REFUSAL.search(m.content)
            if hit:
                start = m.content.rfind(".", 0, hit.start()) + 1
                out.append((i, " ".join(m.content[start : hit.end() + 80].split())))
    return out


def _user_text(messages: Sequence[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "user" and m.content]


def user_fault(trajectory: Trajectory) -> str | None:
    """Why the simulated user, not the agent, ended the episode before the change could be made; None if not."""
    users = _user_text(trajectory.messages)
    if not users:
        return None
    last = users[-1]
    if "###OUT-OF-SCOPE###" in last:
        return "the simulated user left the conversation as out of scope (###OUT-OF-SCOPE###)"
    if "###STOP###" in last and _AFFIRM.search(last.replace("###STOP###", "")):
        tail = trajectory.messages[-1]
        if tail.role == "user":
            return (
                "the simulated user confirmed the change and ended the conversation in the same message (###STOP###), "
                "before the agent could make it"
            )
    return None


def _scalars(data: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [kv for k, v in data.items() for kv in _scalars(v, k)]
    if isinstance(data, list):
        return [kv for v in data for kv in _scalars(v, key)]
    return [(key, data)]


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except (json.JSONDecodeError, TypeError):
        return None


def record_values(trajectory: Trajectory) -> dict[str, set[str]]:
    """Record field -> the string values the agent's successful tool results showed for it."""
    out: dict[str, set[str]] = {}
    for m in trajectory.messages:
        if m.role == "tool" and not m.error:
            for k, v in _scalars(_json(m.content)):
                if isinstance(v, str) and k:
                    out.setdefault(k, set()).add(v.lower())
    return out


def contradicted_claims(trajectory: Trajectory, vocab: dict[str, set[str]] | None = None) -> list[tuple[int, str]]:
    """(message index, claim) for each user message asserting a field value the records read so far contradict."""
    seen: dict[str, set[str]] = {}
    out = []
    for i, m in enumerate(trajectory.messages):
        if m.role == "tool" and not m.error:
            for k, v in _scalars(_json(m.content)):
                if k in _CLAIM_KEYS and isinstance(v, str):
                    seen.setdefault(k, set()).add(v.lower())
        if m.role != "user" or not m.content:
            continue
        low = m.content.lower()
        for key, cues in _CLAIM_KEYS.items():
            words = (vocab or {}).get(key, set()) | {"gold", "silver", "regular", "platinum"}
            for value in sorted(words):
                said = re.search(rf"\b{re.escape(value.replace('_', ' '))}\s+(?:{'|'.join(cues)})", low)
                if said and seen.get(key) and value not in seen[key] and len(seen[key]) == 1:
                    out.append((i, f"user said '{said.group(0)}' but the record shows {key} {next(iter(seen[key]))}"))
    return out


def asked_for_recorded(trajectory: Trajectory) -> list[tuple[int, str]]:
    """(message index, field) where the agent asked the user for a personal detail a record it read holds."""
    shown: set[str] = set()
    out = []
    for i, m in enumerate(trajectory.messages):
        if m.role == "tool" and not m.error:
            shown |= {k for k, v in _scalars(_json(m.content)) if k in _RECORD_FIELDS and v}
            data = _json(m.content)
            if isinstance(data, dict):
                shown |= {k for k in _RECORD_FIELDS if data.get(k)}
        if m.role == "assistant" and m.content and "?" in m.content:
            low = m.content.lower()
            for key in shown:
                phrase = next((p for p in _RECORD_FIELDS[key] if p in low), None)
                asks = (
                    rf"(?:what is|what's|could you (?:please )?(?:provide|share)|please provide) (?:your|the) {phrase}"
                )
                if phrase and re.search(asks, low):
                    out.append((i, f"asked for the {phrase} although a record it read holds it"))
    return out


def _value_words(value: Any) -> str:
    """'gift_card_8190333' -> 'gift card'; 'basic_economy' -> 'basic economy'."""
    return " ".join(w for w in re.split(r"[_\W\d]+", str(value).lower()) if w)


def scenario_text(task: Task | None) -> str:
    if task is None or task.user_scenario is None:
        return ""
    return json.dumps(task.user_scenario, default=str).lower().replace("\\n", " ")


def unasked_preference(want: Any, have: Any, task: Task | None, users: Sequence[str]) -> str | None:
    """Why a required value the user never stated looks like a preference the agent did not ask for, or None."""
    if isinstance(want, (bool, int, float)) or want is None:
        return None
    words = _value_words(want)
    if len(words) < 4 or words == _value_words(have):
        return None
    said = " ".join(users).lower()
    if words in said or str(want).lower() in said:
        return None
    scenario = scenario_text(task)
    if words not in scenario:
        return None
    return f"the user wanted {words} (their goal says so) but was never asked; the agent used {have!r}"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def stated_amounts(texts: Sequence[str]) -> set[float]:
    return {float(x.replace(",", "")) for t in texts for x in _MONEY.findall(t)}


def new_charge(before: Sequence[str], result: str | None) -> float | None:
    """The amount a write charged or refunded: the last `payment_history` entry of the changed record, when no earlier
    result of that record showed it."""
    data = _json(result)
    if not isinstance(data, dict) or not isinstance(data.get("payment_history"), list) or not data["payment_history"]:
        return None
    last = data["payment_history"][-1]
    amount = last.get("amount") if isinstance(last, dict) else None
    if not is_number(amount):
        return None
    key = data.get("reservation_id") or data.get("order_id")
    for text in before:
        old = _json(text)
        same = isinstance(old, dict) and key and (old.get("reservation_id") or old.get("order_id")) == key
        if same and len(old.get("payment_history") or []) >= len(data["payment_history"]):
            return None
    return float(amount)


__all__ = [
    "CAUSE_CAPABILITIES",
    "CAUSE_DEFINITIONS",
    "CLAIMS",
    "ELICIT",
    "NUMERIC",
    "POLICY",
    "asked_for_recorded",
    "contradicted_claims",
    "is_number",
    "is_transfer",
    "new_charge",
    "record_values",
    "refusals",
    "stated_amounts",
    "unasked_preference",
    "user_fault",
]
