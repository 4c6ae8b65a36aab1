"""What the rule analyzers (structural, behavioral) read off a trajectory: the agent's tool calls, each with what it
had seen before it and whether it was executable as written, and which tools change state (the write oracle: the
domain's toolkit, else a name heuristic)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trace_rl.types import Message, ToolCall, Trajectory

WriteOracle = Callable[[str], bool]

_READ_PREFIXES = (
    "get_", "find_", "search_", "list_", "lookup_", "look_up_", "check_", "read_", "view_", "show_", "fetch_",
    "query_", "count_", "calculate", "compute_", "think", "transfer_to_human", "describe_", "browse_",
)  # fmt: skip  # word list: packed, not one per line
MALFORMED = re.compile(
    r"tool '[^']*' not found|could not parse arguments|unexpected keyword argument|missing \d+ required|"
    r"required (positional |keyword )?argument|takes \d+ positional argument",
    re.IGNORECASE,
)


def heuristic_is_write(name: str) -> bool:
    """Name-based fallback: reads start with get_/find_/search_/list_/check_/...; anything else (and check_in /
    check_out) changes state."""
    low = name.lower()
    return low.startswith(("check_in", "check_out")) or not low.startswith(_READ_PREFIXES)


def write_oracle(kinds: Mapping[str, bool] | None = None) -> WriteOracle:
    """`kinds`: tool name -> mutates state (from the domain's toolkit); unknown names fall back to the heuristic."""
    known = dict(kinds or {})
    return lambda name: known[name] if name in known else heuristic_is_write(name)


def domain_write_kinds(domain: Any) -> dict[str, bool]:
    """Tool name -> mutates state, read from a toolkit-backed domain's agent toolkit ({} when unavailable)."""
    try:
        env = domain.make_env()
        tools = env.tools
        return {name: bool(tools.mutates_state(name)) for name in tools.tool_names}
    except Exception:
        return {}


@dataclass
class CallEvent:
    index: int  # position among the agent's calls
    call: ToolCall
    result: Message | None
    context: str  # tool results and user messages seen before the call
    results: list[str] = field(default_factory=list)  # the successful tool results seen before the call
    position: int = 0  # index of the assistant message that made the call
    said: str = ""  # what the user wrote before the call

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def errored(self) -> bool:
        return self.result is not None and self.result.error

    @property
    def malformed(self) -> str | None:
        """Why the call is not executable as written, or None."""
        if self.call.parse_error is not None:
            return f"arguments did not parse ({self.call.parse_error})"
        if self.errored and self.result is not None and MALFORMED.search(squash_first_line(self.result.text)):
            return f"rejected: {squash_first_line(self.result.text)[:160]}"
        return None


def squash_first_line(text: str) -> str:
    return " ".join(text.split())


def agent_calls(trajectory: Trajectory) -> list[CallEvent]:
    results = {m.tool_call_id: m for m in trajectory.messages if m.role == "tool"}
    context: list[str] = []
    said: list[str] = []
    seen: list[str] = []
    events: list[CallEvent] = []
    for position, message in enumerate(trajectory.messages):
        if message.role == "user" and message.content:
            context.append(message.content)
            said.append(message.content)
        if message.role == "tool" and message.content and not message.error:
            context.append(message.content)
            seen.append(message.content)
        if message.role == "assistant":
            for call in message.tool_calls or []:
                if call.requestor == "assistant":
                    event = CallEvent(len(events), call, results.get(call.id), "\n".join(context), list(seen), position)
                    events.append(event)
    return events


__all__ = [
    "MALFORMED",
    "CallEvent",
    "WriteOracle",
    "agent_calls",
    "domain_write_kinds",
    "heuristic_is_write",
    "squash_first_line",
    "write_oracle",
]
