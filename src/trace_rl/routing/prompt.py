"""The routing prompt `M_x` of TRACE §3.5 (docs/method-notes.md §4), built from a `RouterSpec`.

System message: the classifier instruction, then one line per option — a single-token label (A, B, C, …), the
capability's name and description, and one condensed successful trajectory from its synthetic environment — plus the
base label ("no learned capability needed"), closing with "Only output the label." User message 1: the task's first
user message. User message 2: the question, naming the labels. This follows the paper's appendix example (App. E) with
the base label added (the paper describes it; its example omits it) and without the hand-written per-benchmark hints.

Trajectories are condensed the way the appendix shows them: `Customer: …`, `[Agent calls name(args)]`,
`[Tool error]`, `Agent: …`, clipped to a character budget.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from trace_rl.config.route import INSTRUCTION, PromptConfig
from trace_rl.types import Message

if TYPE_CHECKING:
    from trace_rl.artifacts.router import RouterSpec

BASE_DESCRIPTION = (
    "No specialised skill is needed: the request is handled well by the general assistant. "
    "Choose this when none of the skills above clearly applies."
)


def clip(text: str, limit: int) -> str:
    """`text` shortened to `limit` characters, marking the cut."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def _args(arguments: dict[str, object]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def condense_trajectory(messages: list[Message], *, max_chars: int = 600) -> str:
    """A one-paragraph summary of a (successful) trajectory, as in the paper's "Similar scenario" lines."""
    parts: list[str] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "user":
            if m.tool_calls:
                parts.extend(f"[Customer does {c.name}({_args(c.arguments)})]" for c in m.tool_calls)
            elif m.text.strip():
                parts.append(f"Customer: {clip(m.text, 200)}")
        elif m.role == "assistant":
            if m.tool_calls:
                parts.extend(f"[Agent calls {c.name}({clip(_args(c.arguments), 120)})]" for c in m.tool_calls)
            elif m.text.strip():
                parts.append(f"Agent: {clip(m.text, 200)}")
        elif m.role == "tool" and m.error:
            parts.append(f"[Tool error from {m.name or 'tool'}]")
    return clip(" ".join(parts), max_chars)


def option_lines(spec: RouterSpec) -> list[str]:
    """The system message's option lines, one block per label."""
    lines = []
    for opt in spec.options:
        description = opt.description or (BASE_DESCRIPTION if opt.is_base else "")
        name = "general" if opt.is_base else opt.name
        lines.append(f"{opt.label}: {name} — {' '.join(description.split())}".rstrip(" —"))
        if opt.example:
            lines.append(f"   Similar scenario: {opt.example}")
    return lines


def routing_messages(spec: RouterSpec, first_user_message: str, system: str | None = None) -> list[Message]:
    """The messages whose next-token distribution over the labels decides the route."""
    cfg = spec.prompt
    labels = [o.label for o in spec.options]
    system_text = "\n".join([cfg.instruction, "", *option_lines(spec), "", "Only output the label."])
    user = clip(first_user_message, cfg.user_chars)
    if cfg.include_system and system and cfg.system_chars > 0:
        user = f"(Agent instructions, excerpt: {clip(system, cfg.system_chars)})\n\n{user}"
    question = f"{cfg.question} Answer with one label: {', '.join(labels)}."
    return [
        Message(role="system", content=system_text),
        Message(role="user", content=user),
        Message(role="user", content=question),
    ]


__all__ = [
    "BASE_DESCRIPTION",
    "INSTRUCTION",
    "PromptConfig",
    "clip",
    "condense_trajectory",
    "option_lines",
    "routing_messages",
]
