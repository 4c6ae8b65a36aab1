"""Compact, readable trajectory summaries for an analyst's context, and batching them to a character budget.

A summary keeps what TRACE's analysis reads (tool calls, tool results, user and agent messages, the outcome) and cuts
the rest: the system prompt is dropped (it is the same for every trajectory), whitespace is collapsed, each message is
cut to `max_content_chars` (head and tail kept, the cut marked). A trajectory longer than `max_chars` first has its
tool results cut to a quarter of that, so every call stays visible; if still too long it keeps its first (about two
thirds) and last events, marking how many were omitted. Characters are a proxy for tokens (≈ 4 per token).
The LLM analyst's prompts use `chunks.py` on top of these helpers: tool results whole, long trajectories in parts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.types import Message, ToolCall


def squash(text: str | None) -> str:
    return " ".join((text or "").split())


def truncate(text: str, limit: int) -> str:
    """Keep the head (2/3) and tail (1/3) of `text`, marking how much was cut."""
    if len(text) <= limit:
        return text
    marker = f" …[{len(text) - limit} chars cut]… "
    room = max(0, limit - len(marker))
    head = room * 2 // 3
    tail = room - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def _args(call: ToolCall) -> str:
    if call.parse_error is not None:
        return f"<malformed: {call.parse_error}> {call.raw or ''}"
    return json.dumps(call.arguments, ensure_ascii=False, separators=(", ", ": "), default=str)


def message_lines(message: Message, limit: int, result_limit: int | None = None) -> list[str]:
    """One line per event of a message: text, each tool call, or a tool result (cut to `result_limit`)."""
    lines: list[str] = []
    if message.role == "system":
        return lines
    if message.role == "tool":
        tag = "ERROR " if message.error else ""
        cut = limit if result_limit is None else result_limit
        lines.append(f"[result {message.name or ''}] {tag}{truncate(squash(message.content), cut)}")
        return lines
    who = "agent" if message.role == "assistant" else "user"
    if message.thought:
        lines.append(f"{who} (note): {truncate(squash(message.thought), limit // 2)}")
    for call in message.tool_calls or []:
        lines.append(f"{who} -> {call.name}({truncate(squash(_args(call)), limit)})")
    if message.content:
        lines.append(f"{who}: {truncate(squash(message.content), limit)}")
    return lines


def header(item: DiagnosisItem, ref: str | None = None, *, show_outcome: bool = True) -> str:
    t = item.trajectory
    who = f"{ref} " if ref else ""
    parts = [f"### {who}trajectory {t.id} (task {t.task_id})"]
    if show_outcome:
        reward = f"{t.reward:.2f}" if t.reward is not None else "n/a"
        ended = t.termination.value if t.termination is not None else "unknown"
        parts.append(f"{'SUCCEEDED' if item.success else 'FAILED'}, reward {reward}, ended: {ended}")
    return " — ".join(parts)


def summarize(
    item: DiagnosisItem,
    *,
    ref: str | None = None,
    max_content_chars: int = 500,
    max_chars: int = 6_000,
    show_outcome: bool = True,
    show_notes: bool = True,
) -> str:
    """The summary text of one trajectory, at most about `max_chars` characters."""
    top = header(item, ref, show_outcome=show_outcome)
    notes = [f"reference check: {truncate(squash(n), max_content_chars)}" for n in item.notes] if show_notes else []
    fixed = len(top) + sum(len(n) + 1 for n in notes) + 1
    budget = max(200, max_chars - fixed)
    events = _events(item, max_content_chars, None)
    if sum(len(e) + 1 for e in events) > budget:  # first cut tool results harder, so every call stays visible
        events = _events(item, max_content_chars, max(60, max_content_chars // 4))
    body = _fit(events, budget)
    return "\n".join([top, *body, *notes])


def _events(item: DiagnosisItem, limit: int, result_limit: int | None) -> list[str]:
    events: list[str] = []
    for message in item.trajectory.messages:
        events.extend(message_lines(message, limit, result_limit))
    if item.trajectory.errors:
        kinds = sorted({e.kind for e in item.trajectory.errors})
        events.append(f"[episode errors: {len(item.trajectory.errors)} ({', '.join(kinds)})]")
    return events


def _fit(events: list[str], budget: int) -> list[str]:
    """Keep whole events from the start and the end until `budget` characters are used; mark the gap."""
    if sum(len(e) + 1 for e in events) <= budget:
        return events
    head: list[str] = []
    tail: list[str] = []
    used = 40  # room for the omission marker
    i, j = 0, len(events) - 1
    take_head = True
    while i <= j:
        event = events[i] if take_head else events[j]
        if used + len(event) + 1 > budget:
            event = truncate(event, max(40, budget - used - 1))
            if used + len(event) + 1 > budget:
                break
        used += len(event) + 1
        if take_head:
            head.append(event)
            i += 1
        else:
            tail.append(event)
            j -= 1
        take_head = len(head) <= 2 * len(tail)  # about two thirds from the start: the request and first steps
    omitted = j - i + 1
    marker = [f"[… {omitted} events omitted …]"] if omitted > 0 else []
    return head + marker + list(reversed(tail))


def pack(texts: Sequence[str], *, max_items: int, max_chars: int, size: Callable[[str], int] = len) -> list[list[int]]:
    """Greedy batches of indices: at most `max_items` texts and `max_chars` (as `size` counts: characters, or
    tokens) each (one text at least)."""
    batches: list[list[int]] = []
    current: list[int] = []
    size_used = 0
    for i, text in enumerate(texts):
        n = size(text) + 2
        if current and (len(current) >= max_items or size_used + n > max_chars):
            batches.append(current)
            current, size_used = [], 0
        current.append(i)
        size_used += n
    if current:
        batches.append(current)
    return batches


def outcome_counts(items: Sequence[DiagnosisItem]) -> dict[str, Any]:
    passed = sum(item.success for item in items)
    return {"total": len(items), "succeeded": passed, "failed": len(items) - passed}


__all__ = ["header", "message_lines", "outcome_counts", "pack", "squash", "summarize", "truncate"]
