"""Trajectories as the LLM analyst reads them: the user's goal, every event whole, split into parts that fit a budget.

Written for trace-rl (TRACE §3.2 shows the analyst whole trajectories; it does not say how to fit a small context).
A trajectory is a header (reference, id, task, outcome), the user's goal (the task's user scenario, when known), its
events (user and agent messages, tool calls, tool results; the system prompt is shown once per prompt as the policy)
and the reference-check notes. Tool results are shown whole; user and agent text is cut at `max_content_chars`. When
the events do not fit `room` tokens they are split into consecutive parts of whole events, each with the header and
the goal ("part k of n, events a–b of N"), labelled separately and combined (`combine`: LACKING in any part wins,
then PRESENT, then NA). Only an event that alone exceeds a part is shortened, at record boundaries (whole JSON
elements or keys, else whole lines), with a marker saying how many records were left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trace_rl.artifacts.capabilities import Label
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.summaries import header, message_lines, squash, truncate
from trace_rl.types import Message, Task

GOAL_CHARS = 3_000
_GOAL_KEYS = ("reason_for_call", "known_info", "unknown_info", "task_instructions")
Counter = Callable[[str], int]


@dataclass
class Unit:
    """One labelled piece: a whole trajectory (`part` 0 of 1) or one of its parts."""

    item: DiagnosisItem
    part: int
    parts: int
    events: list[str]
    first: int
    total: int

    def text(self, ref: str | None, *, show_outcome: bool = True, goal: bool = True) -> str:
        top = header(self.item, ref, show_outcome=show_outcome)
        if self.parts > 1:
            top += f" — part {self.part + 1} of {self.parts} (events {self.first + 1}–{self.first + len(self.events)}"
            top += f" of {self.total})"
        lines = [top]
        if goal:
            lines.append(f"user's goal: {goal_text(self.item.task)}")
        lines.extend(self.events)
        lines.extend(f"reference check: {squash(n)}" for n in self.item.notes)
        return "\n".join(lines)


def goal_text(task: Task | None) -> str:
    """The user's goal from the task's user scenario (τ² `instructions` fields), else its ticket, else unknown."""
    if task is None:
        return "(not recorded)"
    scenario: Any = task.user_scenario
    parts: list[str] = []
    if isinstance(scenario, dict):
        persona = scenario.get("persona")
        if persona:
            parts.append(f"persona: {persona}")
        instructions = scenario.get("instructions", scenario)
        if isinstance(instructions, dict):
            parts += [f"{k}: {instructions[k]}" for k in _GOAL_KEYS if instructions.get(k)]
        elif instructions:
            parts.append(str(instructions))
    elif scenario:
        parts.append(str(scenario))
    if not parts and task.ticket:
        parts.append(task.ticket)
    return truncate(squash(" | ".join(parts)), GOAL_CHARS) if parts else "(not recorded)"


def policy_of(item: DiagnosisItem) -> str:
    """The agent's policy: the environment's (`item.policy`), else the trajectory's system prompt."""
    if item.policy:
        return item.policy.strip()
    system = next((m for m in item.trajectory.messages if m.role == "system"), None)
    return (system.text if system is not None else "").strip()


def events_of(item: DiagnosisItem, max_content_chars: int) -> list[str]:
    """One line per event; tool results whole (`message_lines` cuts only user and agent text)."""
    events: list[str] = []
    for message in item.trajectory.messages:
        if message.role == "tool":
            events.append(_result_line(message))
        else:
            events.extend(message_lines(message, max_content_chars))
    if item.trajectory.errors:
        kinds = sorted({e.kind for e in item.trajectory.errors})
        events.append(f"[episode errors: {len(item.trajectory.errors)} ({', '.join(kinds)})]")
    return events


def _result_line(message: Message) -> str:
    tag = "ERROR " if message.error else ""
    return f"[result {message.name or ''}] {tag}{squash(message.content)}"


def shorten_record(text: str, limit: int) -> str:
    """`text` in at most about `limit` characters without cutting a record: a JSON value keeps whole elements (or
    keys) and says how many it left out; other text keeps whole lines; one long line is cut with a marker."""
    if len(text) <= limit:
        return text
    prefix, sep, body = text.partition("] ")
    if not sep:
        prefix, body = "", text
    else:
        prefix += sep
    room = max(20, limit - len(prefix))
    tag = "ERROR " if body.startswith("ERROR ") else ""
    body = body[len(tag) :]
    try:
        value = json.loads(body)
    except ValueError:
        return prefix + tag + _whole_lines(body, room)
    return prefix + tag + _shorten_json(value, room - len(tag))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _shorten_json(value: Any, room: int) -> str:
    if not isinstance(value, (list, dict)):
        return truncate(_dumps(value), room)
    is_dict = isinstance(value, dict)
    items = list(value.items()) if is_dict else list(enumerate(value))
    kept: list[str] = []
    used = 2
    for i, (key, item) in enumerate(items):
        key_text = f"{_dumps(str(key))}: " if is_dict else ""
        piece = key_text + _dumps(item)
        marker_room = 40
        if used + len(piece) + 2 + marker_room <= room:
            kept.append(piece)
            used += len(piece) + 2
            continue
        rest = len(items) - i
        inner_room = room - used - marker_room - len(key_text) - 4
        if isinstance(item, (list, dict)) and (not kept or inner_room >= 120):  # room left: go one level down
            kept.append(key_text + _shorten_json(item, max(inner_room, 40)))
            rest -= 1
        if rest:
            marker = _dumps(f"…[{rest} more records omitted]")
            kept.append(f'"…": {marker}' if is_dict else marker)
        break
    open_, close = ("{", "}") if is_dict else ("[", "]")
    return open_ + ", ".join(kept) + close


def _whole_lines(text: str, room: int) -> str:
    lines = text.splitlines() or [text]
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > room - 40:
            break
        kept.append(line)
        used += len(line) + 1
    if not kept:
        return truncate(text, room)
    return "\n".join(kept) + f" …[{len(lines) - len(kept)} more lines omitted]"


def split_units(item: DiagnosisItem, room: int, count: Counter, *, max_content_chars: int) -> list[Unit]:
    """The item as consecutive parts of whole events, each (header and goal included) about `room` tokens at most."""
    events = events_of(item, max_content_chars)
    total = len(events)
    bare = Unit(item, 0, 1, [], 0, total)
    fixed = count(bare.text("T000") + " — part 00 of 00 (events 000–000 of 000)") + 2
    space = room - fixed
    if space < 16:
        space = 16
    chars_per_token = max(1.0, len(" ".join(events)) / max(1, count(" ".join(events)))) if events else 3.0
    sized: list[tuple[str, int]] = []
    for event in events:
        n = count(event) + 1
        if n > space:  # only an event that alone exceeds a part is shortened, at record boundaries
            event = shorten_record(event, int(space * chars_per_token * 0.9))
            while count(event) + 1 > space and len(event) > 40:
                event = shorten_record(event, int(len(event) * 0.8))
            n = count(event) + 1
        sized.append((event, n))
    groups: list[tuple[int, list[str]]] = []
    start, current, used = 0, [], 0
    for i, (event, n) in enumerate(sized):
        if current and used + n > space:
            groups.append((start, current))
            start, current, used = i, [], 0
        current.append(event)
        used += n
    groups.append((start, current))
    return [Unit(item, k, len(groups), evs, first, total) for k, (first, evs) in enumerate(groups)]


def combine(labels: Sequence[Label]) -> Label:
    """A trajectory's label from its parts': LACKING in any part, else PRESENT in any, else NA."""
    if Label.LACKING in labels:
        return Label.LACKING
    return Label.PRESENT if Label.PRESENT in labels else Label.NA


__all__ = ["Unit", "combine", "events_of", "goal_text", "policy_of", "shorten_record", "split_units"]
