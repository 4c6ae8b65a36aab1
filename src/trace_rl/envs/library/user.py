"""The deterministic scripted member: plays a task's `UserScript` without a model.

Each reply looks at the agent's latest text message, in this order:
1. goal reached (every request handled, see below) → thank and `###STOP###`;
2. a confirmation question (a question with a cue like "shall I" and a write verb) → "Yes" when it matches one of
   the member's requests (same kind of change, and the title, id or amount), else "No" and the request restated;
3. a question for known facts (email, name, postcode, preference, amount) → the facts asked for;
4. any other question → the first unhandled request, restated;
5. a statement that leaves requests unhandled → the first of them restated, at most twice in a row; then stop.
It also stops after `max_replies` replies or when the agent repeats itself. A request is handled when every one of
its `evidence` strings has been heard in an agent statement (not in a confirmation question), or, when it has no
evidence, once the member confirmed it and the agent made a statement afterwards.
"""

from __future__ import annotations

import re

from trace_rl.envs.library.scenario import Request, UserScript
from trace_rl.types import Message, Task

STOP = "###STOP###"
THANKS = f"Thank you, that's all I needed. {STOP}"

WRITE_VERBS: dict[str, tuple[str, ...]] = {
    "check_out": ("check out", "check it out", "checkout", "borrow", "lend"),
    "return": ("return",),
    "renew": ("renew", "extend"),
    "place_hold": ("hold", "reserve"),
    "cancel_hold": ("cancel",),
    "pay_fine": ("pay", "payment", "charge"),
}
CONFIRM_CUES = (
    "shall i", "should i", "do you want", "would you like me", "would you like to", "want me to", "can i go ahead",
    "may i", "confirm", "proceed", "is that ok", "is that okay", "is that correct", "is that right", "ok?", "okay?",
    "yes or no", "yes/no", "go ahead",
)  # fmt: skip  # word list: packed, not one per line
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def normalize(text: str) -> str:
    """The evaluator's view of agent text: lower case, commas removed."""
    return text.replace(",", "").lower()


def mentions_verb(text: str, kind: str) -> bool:
    if kind == "place_hold" and "cancel" in text:
        return False
    return any(v in text for v in WRITE_VERBS.get(kind, ()))


def is_confirmation(text: str) -> bool:
    low = text.lower()
    asks = "?" in low or "confirm" in low
    return asks and any(c in low for c in CONFIRM_CUES) and any(mentions_verb(low, k) for k in WRITE_VERBS)


ASK_CUES = (
    "?", "please provide", "please give", "please tell", "please share", "please confirm your", "i need your",
    "tell me your", "may i have", "what is your", "could you", "can you",
)  # fmt: skip  # word list: packed, not one per line


def asks_something(text: str) -> bool:
    low = text.lower()
    return any(c in low for c in ASK_CUES)


def _numbers(text: str) -> list[float]:
    return [float(n) for n in _NUMBER.findall(text)]


def _has_key(text: str, key: str) -> bool:
    """A match key: a lowercase substring, or '#<number>' for any number in the text equal to it."""
    if key.startswith("#"):
        return float(key[1:]) in _numbers(text)
    return key in text


def matches(request: Request, text: str) -> bool:
    """Whether a confirmation question proposes this request."""
    low = normalize(text)
    if not mentions_verb(low, request.kind):
        return False
    return any(all(_has_key(low, key) for key in alternative) for alternative in request.match)


class LibraryScriptedUser:
    """A deterministic member for one task (the `UserSimulator` protocol)."""

    def __init__(self, script: UserScript, *, name: str = "library-scripted") -> None:
        self.script = script
        self.name = name
        self.confirmed: set[int] = set()
        self.statement_after_confirm: set[int] = set()
        self.heard: list[str] = []
        self.replies = 0
        self.reminders = 0
        self.last_agent_text: str | None = None

    @classmethod
    def for_task(cls, task: Task) -> LibraryScriptedUser:
        """The member of `task`, caught up with the task's replayed message history (its own replies in it)."""
        from trace_rl.envs.state import history_to_messages

        user = cls(UserScript.model_validate(task.metadata["user_script"]))
        history = task.initial_state.message_history if task.initial_state else None
        if history:
            user.resume(history_to_messages(history))
        return user

    def resume(self, messages: list[Message]) -> None:
        """Replay the member's part of `messages` (a conversation it took part in) to rebuild what it has heard and
        confirmed; deterministic, so the replies equal the ones in `messages` when it wrote them."""
        for i, message in enumerate(messages):
            if message.role == "user" and i > 0:
                self.respond(messages[:i])

    # -- state ------------------------------------------------------------------------------------------------------
    def handled(self, i: int) -> bool:
        request = self.script.requests[i]
        if request.evidence:
            return all(any(e.lower() in h for h in self.heard) for e in request.evidence)
        return i in self.statement_after_confirm

    def pending(self) -> list[int]:
        return [i for i in range(len(self.script.requests)) if not self.handled(i)]

    # -- replies ----------------------------------------------------------------------------------------------------
    def facts_asked(self, text: str) -> str | None:
        low = text.lower()
        facts = self.script.facts
        parts: list[str] = []
        if "email" in low:
            parts.append(f"My email is {facts['email']}." if "email" in facts else "I don't remember my email.")
        if any(k in low for k in ("name", "postcode", "post code", "zip")) and "first_name" in facts:
            parts.append(
                f"My name is {facts['first_name']} {facts['last_name']} and my postcode is {facts['postcode']}."
            )
        if any(k in low for k in ("member id", "member number", "card number", "library card number")):
            parts.append("I don't know my member number.")
        if any(k in low for k in ("format", "edition", "language", "which copy")) and "preference" in facts:
            parts.append(facts["preference"])
        return " ".join(parts) or None

    def restate(self) -> str:
        pending = self.pending()
        request = self.script.requests[pending[0] if pending else 0]
        return request.text

    async def reply(self, history: list[Message]) -> Message:
        return Message(role="user", content=self.respond(history))

    def respond(self, history: list[Message]) -> str:
        """The next line, from the visible history (agent texts and own turns)."""
        agent_texts = [m.content for m in history if m.role == "assistant" and m.content]
        if not any(m.role == "user" for m in history):
            return self.script.opening
        self.replies += 1
        text = agent_texts[-1] if agent_texts else ""
        repeated = text == self.last_agent_text
        self.last_agent_text = text
        confirmation = is_confirmation(text)
        if not confirmation:
            self.heard.append(normalize(text))
            self.statement_after_confirm.update(self.confirmed)
        if not self.pending():
            return THANKS
        if repeated or self.replies > self.script.max_replies:
            return STOP
        if confirmation:
            hits = [i for i, r in enumerate(self.script.requests) if matches(r, text)]
            if hits:
                self.confirmed.update(hits)
                self.reminders = 0
                return "Yes, please go ahead."
            return f"No, that is not what I asked for. {self.restate()}"
        facts = self.facts_asked(text) if asks_something(text) else None
        if facts:
            self.reminders = 0
            return facts
        if asks_something(text):
            return self.restate()
        self.reminders += 1
        if self.reminders > 2:
            return STOP
        return self.restate()
