"""A deterministic user for generated tasks whose target domain has no scripted user of its own (τ² variants,
author-generated tasks without a domain script).

It opens with the task's request, answers questions about the facts it knows (email, name, zip or postcode,
address, order or reservation ids it was given), says yes to a confirmation question, and stops once it has heard
every value it waits for (`communicate_info`), or after the first plain statement following its yes when it waits
for none, or after `max_replies`.
"""

from __future__ import annotations

from typing import Any

from trace_rl.types import Message, Task

STOP = "###STOP###"
CONFIRM_CUES = (
    "confirm", "proceed", "shall i", "should i", "would you like", "do you want", "go ahead", "is that correct",
    "is that right", "yes or no", "(yes", "ok?", "okay?",
)  # fmt: skip  # word list: packed, not one per line
FACT_CUES: dict[str, tuple[str, ...]] = {
    "email": ("email",),
    "name": ("name",),
    "zip": ("zip", "postcode", "post code", "postal"),
    "postcode": ("postcode", "post code", "zip", "postal"),
    "user_id": ("user id",),
    "order_id": ("order id", "order number", "which order"),
    "reservation_id": ("reservation", "booking"),
    "payment": ("payment", "refund", "card", "pay "),
    "address": ("address",),
}


class TemplateUser:
    """The `UserSimulator` protocol over a task's `metadata["template_user"]` (opening, facts, waits_for)."""

    def __init__(self, opening: str, facts: dict[str, str], waits_for: list[str], *, max_replies: int = 10) -> None:
        self.name = "synthetic-template"
        self.opening = opening
        self.facts = facts
        self.waits_for = [w.lower() for w in waits_for]
        self.max_replies = max_replies
        self.replies = 0
        self.confirmed = False
        self.heard = ""
        self.reminded = 0

    @classmethod
    def for_task(cls, task: Task) -> TemplateUser:
        data: dict[str, Any] = task.metadata.get("template_user") or {}
        opening = data.get("opening") or _opening_from_scenario(task)
        waits = data.get("waits_for")
        if waits is None:
            waits = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
        return cls(opening, dict(data.get("facts") or {}), list(waits), max_replies=int(data.get("max_replies", 10)))

    async def reply(self, history: list[Message]) -> Message:
        return Message(role="user", content=self.respond(history))

    def respond(self, history: list[Message]) -> str:
        if not any(m.role == "user" for m in history):
            return self.opening
        self.replies += 1
        texts = [m.content for m in history if m.role == "assistant" and m.content]
        text = (texts[-1] if texts else "").strip()
        low = text.lower()
        asks = "?" in low or any(c in low for c in ("please provide", "please confirm", "could you", "can you"))
        if not asks:
            self.heard += "\n" + low.replace(",", "")
        if self.waits_for and all(w.replace(",", "") in self.heard for w in self.waits_for):
            return f"Thank you, that's everything. {STOP}"
        if self.replies > self.max_replies:
            return STOP
        if asks and any(c in low for c in CONFIRM_CUES):
            self.confirmed = True
            return "Yes, please go ahead."
        if asks:
            answer = self._facts(low)
            if answer:
                return answer
            return self.opening if self.reminded < 2 and not self.confirmed else "Yes."
        if self.confirmed and not self.waits_for:
            return f"Thank you, that's all. {STOP}"
        self.reminded += 1
        if self.reminded > 2:
            return STOP
        return f"Could you please take care of it? {self.opening}"

    def _facts(self, low: str) -> str | None:
        parts = []
        for key, value in self.facts.items():
            cues = FACT_CUES.get(key, (key.replace("_", " "),))
            if any(c in low for c in cues):
                parts.append(f"My {key.replace('_', ' ')} is {value}.")
        return " ".join(parts) or None


def _opening_from_scenario(task: Task) -> str:
    scenario = task.user_scenario
    if isinstance(scenario, str):
        return scenario
    instructions = (scenario or {}).get("instructions")
    if isinstance(instructions, dict):
        return " ".join(str(instructions.get(k) or "") for k in ("reason_for_call", "known_info")).strip() or "Hi."
    return str(instructions or "Hi.")


__all__ = ["TemplateUser"]
