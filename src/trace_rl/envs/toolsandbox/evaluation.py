"""ToolSandbox's evaluator: milestones and minefields matched to world snapshots (Lu et al. 2024, §3.3).

A milestone is a set of snapshot constraints. Its similarity at message index i is the product of its constraint
similarities raised to 1 / (number of non-guardrail constraints): the geometric mean of the real constraints, times
every guardrail (0 or 1). Milestones are mapped to message indices by a depth-first search over DAG-consistent
assignments (each milestone after its predecessors, indices non-decreasing), maximising the sum of similarities; the
search order, the pruning bound and the "strictly better" rule follow upstream (apple/ToolSandbox 165848b,
`MilestoneMatcher._dfs`), so ties resolve to the same mapping. The scenario similarity is the arithmetic mean over
milestones (1 without milestones), nullified when the minefields' mean similarity is non-zero.

The constraint specs come from the data package (guardrails already expanded); nothing here is upstream code.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from trace_rl.envs.toolsandbox import similarity as sim
from trace_rl.envs.toolsandbox.tables import Tables

Mapping = OrderedDict[int, tuple[int, float]]


@dataclass
class EvaluationResult:
    milestone_similarity: float
    minefield_similarity: float
    turn_count: int
    milestone_mapping: dict[int, tuple[int, float]] = field(default_factory=dict)
    minefield_mapping: dict[int, tuple[int, float]] = field(default_factory=dict)

    @property
    def similarity(self) -> float:
        return self.milestone_similarity if self.minefield_similarity == 0 else 0.0

    @property
    def perfect(self) -> bool:
        return self.similarity == 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "similarity": self.similarity,
            "milestone_similarity": self.milestone_similarity,
            "minefield_similarity": self.minefield_similarity,
            "turn_count": self.turn_count,
            "milestone_mapping": {str(k): list(v) for k, v in self.milestone_mapping.items()},
            "minefield_mapping": {str(k): list(v) for k, v in self.minefield_mapping.items()},
        }


class MilestoneScorer:
    """Similarity of one milestone at a message index, given the mapping so far (cached per constraint)."""

    def __init__(self, milestone: dict[str, Any], tables: Tables, defaults: dict[str, Any], dtypes: dict) -> None:
        self.constraints = milestone["snapshot_constraints"]
        self.tables = tables
        self.first_user = tables.first_user_index()
        self.dtypes = dtypes
        self.measures = [
            sim.resolve_measures(defaults[c["database"]], c.get("column_similarity_overrides") or {})
            for c in self.constraints
        ]
        self.targets = [(c.get("target") or {}).get("rows") for c in self.constraints]
        self.cache: list[dict[tuple[int, int | None], float]] = [{} for _ in self.constraints]

    def _constraint(self, k: int, index: int, ref_index: int | None) -> float:
        c = self.constraints[k]
        db = c["database"]
        snapshot = self._snap(db, index)
        reference = self._snap(db, ref_index) if ref_index is not None else None
        kind = c["snapshot_constraint"]["kind"]
        target, measures = self.targets[k], self.measures[k]
        dtypes = self.dtypes[db]
        if kind == "snapshot_similarity":
            return sim.snapshot_similarity(snapshot, target, measures)
        if kind == "guardrail_similarity":
            return sim.guardrail_similarity(snapshot, reference or [])
        if reference is None:
            raise ValueError(f"{kind} needs a reference milestone")
        if kind == "addition_similarity":
            return sim.addition_similarity(snapshot, target, measures, reference, dtypes)
        if kind == "removal_similarity":
            return sim.removal_similarity(snapshot, target, measures, reference, dtypes)
        if kind == "update_similarity":
            return sim.update_similarity(snapshot, target, measures, reference, dtypes)
        if kind == "tool_trace_dependant_similarity":
            return sim.tool_trace_dependant_similarity(
                snapshot, target, measures, reference, c["snapshot_constraint"]["params"]
            )
        raise ValueError(f"unknown snapshot constraint '{kind}'")

    def _snap(self, db: str, index: int) -> list[dict[str, Any]]:
        return self.tables.snapshot(db, index)

    def similarity(self, index: int, mapping: Mapping) -> float:
        product, count = 1.0, 0
        for k, c in enumerate(self.constraints):
            ref = c.get("reference_milestone_index")
            ref_index = None if ref is None else self.first_user if ref == -1 else mapping[ref][0]
            key = (index, ref_index)
            if key not in self.cache[k]:
                self.cache[k][key] = self._constraint(k, index, ref_index)
            product *= self.cache[k][key]
            count += c["snapshot_constraint"]["kind"] != "guardrail_similarity"
        return math.pow(product, 1 / count)


def _dfs(
    mapping: Mapping,
    scorers: list[MilestoneScorer],
    assigned_sum: float,
    remaining: dict[int, set[int]],
    lo: int,
    hi: int,
) -> tuple[Mapping, float]:
    """Upstream's search: candidates popped by (-similarity, milestone, index); a branch is pruned when even all
    remaining milestones at 1.0 could not beat the best sum found at this level."""
    if not remaining:
        return mapping, assigned_sum
    last = mapping[next(reversed(mapping))][0] if mapping else lo
    heap: list[tuple[float, int, int]] = []
    for node in sorted(remaining):
        if remaining[node]:
            continue
        for index in range(hi, last - 1, -1):
            heapq.heappush(heap, (-scorers[node].similarity(index, mapping), node, index))
    best_mapping: Mapping = OrderedDict()
    best_sum = -1.0
    while heap:
        neg, node, index = heapq.heappop(heap)
        value = -neg
        if assigned_sum + value + len(remaining) - 1 <= best_sum:
            continue
        child = OrderedDict(mapping)
        child[node] = (index, value)
        rest = {n: preds - {node} for n, preds in remaining.items() if n != node}
        child, child_sum = _dfs(child, scorers, assigned_sum + value, rest, lo, hi)
        if child_sum > best_sum:
            best_mapping, best_sum = child, child_sum
    return best_mapping, best_sum


def match(
    milestones: list[dict[str, Any]],
    nodes: list[int],
    edges: list[list[int]],
    tables: Tables,
    defaults: dict[str, Any],
    dtypes: dict[str, dict[str, str]],
) -> tuple[dict[int, tuple[int, float]], float | None]:
    """Best DAG-consistent mapping of milestones to message indices and its mean similarity (None: no milestones)."""
    if not nodes:
        return {}, None
    scorers = [MilestoneScorer(m, tables, defaults, dtypes) for m in milestones]
    predecessors: dict[int, set[int]] = {n: set() for n in nodes}
    for a, b in edges:
        predecessors.setdefault(a, set())
        predecessors.setdefault(b, set()).add(a)
    mapping, total = _dfs(OrderedDict(), scorers, 0.0, predecessors, tables.first_user_index(), tables.max_index)
    return dict(mapping), total / len(milestones)


def turn_count(tables: Tables) -> int:
    """Messages that are not from SYSTEM, not user <-> execution environment, not few-shot (visible_to set)."""
    count = 0
    for row in tables.snapshot("SANDBOX", history=True):
        if row["sender"] == "SYSTEM" or row["visible_to"] is None or row["visible_to"] == ["USER"]:
            continue
        if {row["sender"], row["recipient"]} == {"USER", "EXECUTION_ENVIRONMENT"}:
            continue
        count += 1
    return count


def evaluate(scenario: dict[str, Any], tables: Tables, meta: dict[str, Any]) -> EvaluationResult:
    """Score a played episode (its tables) against the scenario's milestones and minefields."""
    defaults = meta["default_column_similarity"]
    dtypes = {
        name: {c["name"]: c["dtype"] for c in scenario["initial_databases"][name]["columns"]}
        for name in scenario["initial_databases"]
    }
    ms_map, ms_sim = match(
        scenario["milestones"],
        scenario["milestone_dag_nodes"],
        scenario["milestone_dag_edges"],
        tables,
        defaults,
        dtypes,
    )
    mf_map, mf_sim = match(
        scenario["minefields"],
        scenario["minefield_dag_nodes"],
        scenario["minefield_dag_edges"],
        tables,
        defaults,
        dtypes,
    )
    return EvaluationResult(
        milestone_similarity=1.0 if ms_sim is None else ms_sim,
        minefield_similarity=0.0 if mf_sim is None else mf_sim,
        turn_count=turn_count(tables),
        milestone_mapping=dict(sorted(ms_map.items())),
        minefield_mapping=mf_map,
    )


__all__ = ["EvaluationResult", "evaluate", "match", "turn_count"]
