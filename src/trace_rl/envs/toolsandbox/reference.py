"""Reference paths for ToolSandbox scenarios, and their replay through the environment (`env check toolsandbox`).

A reference path is a list of agent steps (`{"type": "tool_call", "name", "arguments"}`, `{"type": "message",
"content"}`) and, optionally, user turns (`{"type": "user", "content"}`) that should reach similarity 1.0.

- **Derived from milestones** (the default): walk the milestone DAG in lexicographic topological order and emit
  what each milestone asks for: the tool call of a SANDBOX tool-trace target (several tool-trace constraints on one
  tool in one milestone are merged into one call), values of `tool_trace_dependant` constraints filled from the
  actual result of the referenced milestone's call, the tool call that makes a database constraint true
  (`addition` on CONTACT -> `add_contact`, on REMINDER -> `add_reminder`, on MESSAGING ->
  `send_message_with_phone_number`; `update` -> `modify_*`; `removal` -> `remove_*`; a SETTING snapshot ->
  `set_*_status`), and the agent's reply for an AGENT -> USER content target (a `contains` target that the reply
  lacks is appended). This follows the oracle the data package describes (README §6), with the merge, the database
  mapping and the reply joining added; it works wherever the milestones give every argument.
- **Written by hand** where they do not (`reference_paths.json`, keyed by scenario name, execution-facing tool
  names): values the milestones leave open (a timestamp to compute, an id to look up, a clarification to ask for)
  were read from the scenario's world and user instruction at the frozen instant and checked by replay.

Replay: each step goes through `ToolSandboxEnvironment.execute` as an agent's call would; between agent replies the
user says "Yes, go ahead." (or the path's own user turn) and ends the conversation after the last one; the
conversation is scored by the environment's `score`, i.e. the trace-rl path a rollout takes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.envs.toolsandbox.similarity import EXTRACTORS
from trace_rl.types import Message, Task, TerminationReason, ToolCall

STOP_TOKEN = "###STOP###"  # trace-rl's user stop token: the user's end_conversation()
PATHS_FILE = Path(__file__).with_name("reference_paths.json")
GO_AHEAD = "Yes, go ahead."
SETTING_TOOLS = {  # order matters: low battery mode blocks turning the others on
    "low_battery_mode": "set_low_battery_mode_status",
    "cellular": "set_cellular_service_status",
    "wifi": "set_wifi_status",
    "location_service": "set_location_service_status",
}
MAX_ORDERS = 120  # topological orders tried when deriving (milestone DAGs have at most 6 nodes)
Step = dict[str, Any]


@functools.cache
def hand_written() -> dict[str, list[Step]]:
    """The hand-written reference paths (scenario name -> steps)."""
    raw = json.loads(PATHS_FILE.read_text(encoding="utf-8"))
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def topological_orders(nodes: list[int], edges: list[list[int]], limit: int = MAX_ORDERS) -> list[list[int]]:
    """Up to `limit` topological orders of the DAG, the lexicographic one first."""
    preds = {n: {a for a, b in edges if b == n} for n in nodes}
    out: list[list[int]] = []

    def walk(order: list[int]) -> None:
        if len(out) >= limit:
            return
        if len(order) == len(nodes):
            out.append(list(order))
            return
        for n in sorted(nodes):
            if n not in order and preds[n] <= set(order):
                walk([*order, n])

    walk([])
    return out


def _db_calls(database: str, kind: str, row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The tool call(s) that make one target row of a database constraint true."""
    if database == "SETTING":
        return [(tool, {"on": row[col]}) for col, tool in SETTING_TOOLS.items() if col in row]
    if database == "MESSAGING" and kind == "addition":
        return [("send_message_with_phone_number", {"phone_number": row["recipient_phone_number"], **_only(row)})]
    tools = {
        ("CONTACT", "addition"): "add_contact",
        ("CONTACT", "update"): "modify_contact",
        ("CONTACT", "removal"): "remove_contact",
        ("REMINDER", "addition"): "add_reminder",
        ("REMINDER", "update"): "modify_reminder",
        ("REMINDER", "removal"): "remove_reminder",
    }
    tool = tools.get((database, kind))
    if tool is None:
        return []
    args = dict(row)
    if kind == "removal":
        args = {k: v for k, v in row.items() if k in ("person_id", "reminder_id")}
    return [(tool, args)]


def _only(row: dict[str, Any]) -> dict[str, Any]:
    return {"content": row["content"]} if "content" in row else {}


@dataclass
class _Milestone:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    replies: list[tuple[str, bool]] = field(default_factory=list)  # (text, is a `contains` target)


class Replay:
    """One scenario's reference path played through a fresh environment, derived step by step if not given."""

    def __init__(self, domain: Any, task: Task) -> None:
        self.task = task
        self.scenario = domain.scenario(task)
        self.env = domain.make_env()
        self.messages: list[Message] = list(self.env.reset(task))
        self.to_agent = {b: a for a, b in (self.scenario.get("agent_to_execution_tool_name") or {}).items()}
        self.traces: dict[int, list[str]] = {}
        self.errors: list[str] = []
        self.steps: list[Step] = []
        self._n = 0

    # -- playing ---------------------------------------------------------------------------------------------
    def call(self, name: str, arguments: dict[str, Any]) -> list[str]:
        """Execute one tool call as the agent; the tool traces it left (empty on an error)."""
        self._n += 1
        self.steps.append({"type": "tool_call", "name": name, "arguments": arguments})
        tc = ToolCall(id=f"r{self._n}", name=self.to_agent.get(name, name), arguments=arguments)
        self.messages.append(Message(role="assistant", content="", tool_calls=[tc]))
        result = self.env.execute(tc)
        self.messages.append(result)
        if result.error:
            self.errors.append(f"{name}: {result.content}")
            return []
        assert self.env.sandbox is not None
        last = self.env.sandbox.tables.last_message()
        return list(last.get("tool_trace") or [])

    def say(self, text: str) -> None:
        self.steps.append({"type": "message", "content": text})
        self.messages.append(Message(role="assistant", content=text))

    def user(self, text: str) -> None:
        self.messages.append(Message(role="user", content=text))

    def play(self, steps: list[Step]) -> None:
        for i, step in enumerate(steps):
            kind = step["type"]
            if kind == "tool_call":
                self.call(step["name"], step.get("arguments", {}))
            elif kind == "user":
                self.user(step["content"])
            else:
                self.say(step["content"])
                nxt = steps[i + 1] if i + 1 < len(steps) else None
                if nxt is not None and nxt["type"] != "user":
                    self.user(GO_AHEAD)
        self.finish()

    def finish(self) -> None:
        if not self.messages or self.messages[-1].role != "assistant" or self.messages[-1].tool_calls:
            self.say("Done.")
        self.user(STOP_TOKEN)

    # -- deriving from milestones ------------------------------------------------------------------------------
    def _extract(self, params: dict[str, Any], ref: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for raw in self.traces.get(ref if ref is not None else -2, []):
            try:
                out.extend(EXTRACTORS[params["extractor"]["kind"]](json.loads(raw)))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return out

    def _plan(self, milestone: dict[str, Any]) -> _Milestone:
        plan = _Milestone()
        db_calls: list[tuple[str, dict[str, Any]]] = []
        for c in milestone["snapshot_constraints"]:
            kind, rows = c["constraint_type"], (c["target"] or {}).get("rows") or []
            if kind == "guardrail" or not rows:
                continue
            row = rows[0]
            if c["database"] != "SANDBOX":
                for target_row in rows:
                    db_calls.extend(_db_calls(c["database"], kind, target_row))
                continue
            params = c["snapshot_constraint"].get("params") or {}
            values = self._extract(params, c["reference_milestone_index"]) if kind == "tool_trace_dependant" else []
            if row.get("tool_trace"):
                trace = json.loads(row["tool_trace"])
                trace = trace[0] if isinstance(trace, list) else trace
                args = {**trace["arguments"], **(values[0] if values else {})}
                same = [a for n, a in plan.calls if n == trace["tool_name"]]
                if same:
                    same[0].update(args)
                else:
                    plan.calls.append((trace["tool_name"], args))
            elif row.get("sender") == "AGENT" and row.get("recipient") == "USER" and "content" in row:
                text = row["content"].format(**values[0]) if values else row["content"]
                contains = (c.get("column_similarity_overrides") or {}).get("content", {}).get("kind", "")
                plan.replies.append((text, contains == "column_contains_similarity"))
        traced = {n for n, _ in plan.calls}
        plan.calls.extend((n, a) for n, a in db_calls if n not in traced)
        return plan

    def derive(self, order: list[int]) -> None:
        s = self.scenario
        for index in order:
            plan = self._plan(s["milestones"][index])
            traces: list[str] = []
            for name, args in plan.calls:
                traces.extend(self.call(name, args))
            self.traces[index] = traces
            reply = ""
            for text, _ in sorted(plan.replies, key=lambda r: r[1]):
                if text not in reply:
                    reply = f"{reply} {text}".strip()
            if reply:
                self.say(reply)
                self.user(GO_AHEAD)
        if self.messages[-1].role == "user" and self.messages[-1].content == GO_AHEAD:
            self.messages.pop()
        self.finish()

    def score(self) -> dict[str, Any]:
        info = self.env.score_now(self.task, self.messages, TerminationReason.USER_STOP)
        return {"similarity": info.reward, **info.breakdown, "mapping": info.details.get("milestone_mapping")}


def replay_reference(domain: Any, task: Task) -> tuple[Replay, dict[str, Any]]:
    """Play `task`'s reference path (hand-written if there is one, else derived); (the replay, its scores).

    A derived path walks the milestones in the lexicographic topological order, then in the other topological orders
    until one reaches 1.0 (a guardrail can require a world change before an earlier milestone's read); the first
    best one is kept."""
    replay = Replay(domain, task)
    paths = hand_written()  # keyed by base scenario: its augmentations share the path (names mapped per scenario)
    steps = paths.get(replay.scenario["name"], paths.get(replay.scenario["base_scenario"]))
    if steps is not None:
        replay.play(steps)
        return replay, replay.score()
    s = replay.scenario
    best: tuple[Replay, dict[str, Any]] | None = None
    for order in topological_orders(s["milestone_dag_nodes"], s["milestone_dag_edges"]):
        replay = Replay(domain, task)
        replay.derive(order)
        scores = replay.score()
        if best is None or scores["similarity"] > best[1]["similarity"]:
            best = (replay, scores)
        if scores["similarity"] == 1.0:
            break
    assert best is not None  # a DAG has at least one topological order (the empty one without milestones)
    return best


__all__ = ["GO_AHEAD", "PATHS_FILE", "Replay", "hand_written", "replay_reference", "topological_orders"]
