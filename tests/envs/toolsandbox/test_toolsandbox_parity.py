"""Parity with ToolSandbox's own evaluator and tools, on the 718 conformance vectors of the data package.

1. The evaluator on each vector's recorded timeline and world history gives the real evaluator's similarity,
   milestone and minefield similarity (within 1e-6), turn count and milestone indices.
2. Replaying each vector's agent steps through trace-rl's tools reproduces the recorded timeline (content, exception,
   traces, visibility) and world history, and scores the same.
"""

from __future__ import annotations

import json
import re

from trace_rl.envs.toolsandbox.evaluation import evaluate
from trace_rl.envs.toolsandbox.tables import is_headguard

from .helpers import needs_data, recorded_tables, replay_steps, scenarios, vectors

pytestmark = needs_data
KEYS = ("similarity", "milestone_similarity", "minefield_similarity")
COLUMNS = ("sender", "recipient", "content", "tool_call_exception", "conversation_active", "visible_to")


def _mask(value: object) -> object:
    """Upstream prints a memory address in two exception texts; it is not reproducible."""
    return re.sub(r" at 0x[0-9A-Fa-f]+>", " at 0x0>", value) if isinstance(value, str) else value


def _score_mismatch(got: dict, expected: dict) -> str | None:
    for key in KEYS:
        if abs(got[key] - expected[key]) > 1e-6:
            return f"{key}: {got[key]} != {expected[key]}"
    if got["turn_count"] != expected["turn_count"]:
        return f"turn_count: {got['turn_count']} != {expected['turn_count']}"
    got_idx = {k: v[0] for k, v in got["milestone_mapping"].items()}
    if got_idx != {k: v[0] for k, v in expected["milestone_mapping"].items()}:
        return f"milestone_mapping: {got['milestone_mapping']} != {expected['milestone_mapping']}"
    return None


def test_vectors_are_there() -> None:
    assert len(vectors()) == 718


def test_evaluator_matches_real_scores_on_every_vector() -> None:
    meta, by_name = scenarios()
    failures = []
    for v in vectors():
        scenario = by_name[v["scenario"]]
        got = evaluate(scenario, recorded_tables(v, scenario), meta).as_dict()
        problem = _score_mismatch(got, v["expected"])
        if problem:
            failures.append(f"{v['vector_id']}: {problem}")
    assert not failures, failures[:5]


def test_replayed_steps_reproduce_timeline_world_and_score() -> None:
    meta, by_name = scenarios()
    failures = []
    for v in vectors():
        scenario = by_name[v["scenario"]]
        sandbox = replay_steps(v, scenario)
        got = sandbox.tables.rows["SANDBOX"][1:]
        if len(got) != len(v["timeline"]):
            failures.append(f"{v['vector_id']}: {len(got)} messages, expected {len(v['timeline'])}")
            continue
        for g, e in zip(got, v["timeline"], strict=True):
            bad = [c for c in COLUMNS if _mask(g.get(c)) != _mask(e.get(c))]
            traces = [json.loads(t) for t in g["tool_trace"] or []] != [json.loads(t) for t in e["tool_trace"] or []]
            if bad or traces:
                failures.append(f"{v['vector_id']} @{e['sandbox_message_index']}: {bad or 'tool_trace'}")
                break
        for db in ("SETTING", "CONTACT", "MESSAGING", "REMINDER"):
            if [r for r in sandbox.tables.rows[db] if not is_headguard(r)] != v["databases_history"][db]:
                failures.append(f"{v['vector_id']}: {db} history differs")
        problem = _score_mismatch(evaluate(scenario, sandbox.tables, meta).as_dict(), v["expected"])
        if problem:
            failures.append(f"{v['vector_id']}: {problem}")
    assert not failures, failures[:5]
