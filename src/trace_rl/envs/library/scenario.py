"""What the scripted member knows and wants: the script each task family writes into `task.metadata["user_script"]`.

A script has an opening line, the member's known facts (email, name, postcode, preferences), and one `Request` per
thing the member came for. A request says how to recognise the agent's confirmation question for it (`match`), and
what the member waits to hear before considering it handled (`evidence`, e.g. the new due date).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RequestKind = Literal["ask", "check_out", "return", "renew", "place_hold", "cancel_hold", "pay_fine"]


class Request(BaseModel):
    """One thing the member wants."""

    model_config = ConfigDict(extra="forbid")

    kind: RequestKind
    text: str = Field(description="How the member asks for it (used again as a reminder).")
    match: list[list[str]] = Field(
        default_factory=list,
        description="Alternatives, each a list of lowercase substrings that must all appear in the agent's "
        "confirmation question; '#<number>' matches any number in the text equal to it.",
    )
    evidence: list[str] = Field(
        default_factory=list,
        description="Strings the member waits to hear (case-insensitive, commas ignored). Empty: a statement after "
        "the member confirmed counts as done.",
    )


class UserScript(BaseModel):
    """The scripted member's whole part."""

    model_config = ConfigDict(extra="forbid")

    opening: str
    facts: dict[str, str] = Field(
        default_factory=dict, description="email, first_name, last_name, postcode, preference, amount, ..."
    )
    requests: list[Request]
    max_replies: int = 10
