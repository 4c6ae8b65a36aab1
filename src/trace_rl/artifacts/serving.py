"""`serve/routes.jsonl`: the routing proxy's decisions, one line per conversation it routed (the last line of a
conversation wins). Written by `trace-rl serve` (`serve.build.build_app`, on by default), read by anyone auditing what
was served."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from trace_rl.artifacts.store import JsonlStore
from trace_rl.types import Record


class RouteLogRecord(Record):
    """One routing decision of the proxy."""

    conversation: str = Field(description="The conversation key (header or derived from the opening messages).")
    adapter: str = Field(description="The adapter served (a capability name, or 'base').")
    how: str = Field(description="How it was decided: router, header, fallback, ...")
    time: float


def routes_log(path: Path) -> JsonlStore:
    """The append-only log at `path`, keyed by conversation."""
    return JsonlStore(path, key="conversation")


__all__ = ["RouteLogRecord", "routes_log"]
