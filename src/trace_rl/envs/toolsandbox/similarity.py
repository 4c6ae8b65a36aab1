"""ToolSandbox's similarity measures: column measures, snapshot measures and tool-trace extractors.

Implements the measures of ToolSandbox (Lu et al. 2024, apple/ToolSandbox commit 165848b) as the data package's
README §4-§5 specifies them and as the upstream evaluator computes them:

- column measures map each row of a snapshot to a similarity in [0, 1] or None (a polars null: a null cell under an
  exact / contains comparison), cast to float32 as upstream's polars columns are;
- `snapshot_similarity` pairs target rows 1:1 with snapshot rows minimising the sum of -log similarities (row cost =
  mean over the non-null column costs); the result is exp(-mean cost) of the best pairing, 0 when every pairing is
  infeasible or a cost is undefined (upstream's `linear_sum_assignment` raising). Pairing is exact (subset dynamic
  programming) instead of the Hungarian algorithm: same optimum, no scipy;
- addition / removal / update compare the rows that changed against the target after filling nulls (numbers -> 0,
  booleans -> false; null strings join null strings, as the conformance vectors show);
- ROUGE-L F-measure with stemming through the `rouge-score` package (the library upstream uses).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

Row = dict[str, Any]
ColumnMeasure = Callable[[list[Row], str, Any, dict[str, Any] | None], list[float | None]]


class _NotGiven:
    """The "argument not given" sentinel (falsy, as upstream's)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = _NotGiven()


def is_close(value: Any, reference: Any, atol: Any = None) -> bool:
    """Numbers within `atol` (an "Infinity" tolerance accepts any number); anything else by ==."""
    if atol is not None:
        atol = math.inf if atol == "Infinity" else float(atol)
        numeric = (int, float)
        if isinstance(value, numeric) and isinstance(reference, numeric):
            return abs(value - reference) <= atol
    return bool(value == reference)


# -- column measures -------------------------------------------------------------------------------------------
def _f32(x: float | None) -> float | None:
    return None if x is None else float(np.float32(x))


def column_exact_match(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    if value is None:
        return [1.0 if row.get(column) is None else 0.0 for row in rows]
    return [None if row.get(column) is None else float(row[column] == value) for row in rows]


def column_close(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    tol = (atol or {}).get(column)
    return [1.0 if is_close(value, row.get(column), tol) else 0.0 for row in rows]


def column_one(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    return [1.0 for _ in rows]


def column_contains(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    return [None if row.get(column) is None else float(str(value) in row[column]) for row in rows]


@lru_cache(maxsize=1)
def _rouge() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


@lru_cache(maxsize=65536)
def rouge_l(target: str, prediction: str) -> float:
    """ROUGE-L F-measure (rouge-score, Porter stemming), float32 like upstream's similarity column."""
    return float(np.float32(_rouge().score(target=target, prediction=prediction)["rougeL"].fmeasure))


def column_rouge_l(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    out: list[float | None] = []
    for row in rows:
        cell = row.get(column)
        out.append(0.0 if cell is None or value is None else rouge_l(str(value), str(cell)))
    return out


def trace_matches(traces: Sequence[str] | None, golden: Any, atol: dict[str, Any] | None) -> bool:
    """Does any trace (JSON strings) call the golden tool with every golden argument equal (within atol)?"""
    if traces is None:
        return False
    goldens = golden if isinstance(golden, list) else [golden]
    parsed = [json.loads(t) for t in traces]
    for gold in goldens:
        for trace in parsed:
            if trace["tool_name"] != gold["tool_name"]:
                continue
            if all(
                is_close(trace["arguments"].get(arg, NOT_GIVEN), expected, (atol or {}).get(arg))
                for arg, expected in gold["arguments"].items()
            ):
                return True
    return False


def column_tool_trace_exact_match(rows: list[Row], column: str, value: Any, atol: dict[str, Any] | None = None) -> list:
    golden = json.loads(value)
    return [float(trace_matches(row.get(column), golden, atol)) for row in rows]


COLUMN_MEASURES: dict[str, ColumnMeasure] = {
    "column_exact_match_similarity": column_exact_match,
    "column_close_similarity": column_close,
    "column_one_similarity": column_one,
    "column_contains_similarity": column_contains,
    "column_rouge_l_similarity": column_rouge_l,
    "column_tool_trace_exact_match_similarity": column_tool_trace_exact_match,
}

Measures = dict[str, tuple[ColumnMeasure, dict[str, Any] | None]]


def resolve_measures(defaults: dict[str, Any], overrides: dict[str, Any]) -> Measures:
    """Column -> (measure, atol_dict) from the database's defaults and a constraint's overrides."""
    specs = {**defaults, **overrides}
    return {col: (COLUMN_MEASURES[s["kind"]], (s.get("params") or {}).get("atol_dict")) for col, s in specs.items()}


# -- snapshot measures -----------------------------------------------------------------------------------------
def _best_pairing(cost: np.ndarray) -> float | None:
    """Minimum total cost of a perfect 1:1 pairing of an n x n matrix; None when it is infinite or undefined."""
    if np.isnan(cost).any():
        return None
    n = cost.shape[0]
    best = {0: 0.0}
    for i in range(n):
        nxt: dict[int, float] = {}
        for mask, total in best.items():
            for j in range(n):
                if not mask & (1 << j):
                    key, val = mask | (1 << j), total + float(cost[i, j])
                    if val < nxt.get(key, math.inf):
                        nxt[key] = val
        best = nxt
    total = best.get((1 << n) - 1, math.inf)
    return None if math.isinf(total) else total


def snapshot_similarity(snapshot: list[Row], target: list[Row], measures: Measures) -> float:
    if len(snapshot) != len(target):
        return 0.0
    if target and snapshot and set(target[0]) - set(snapshot[0]):
        return 0.0
    if not target:
        return 0.0  # upstream cannot stack an empty cost matrix; no constraint in the data reaches this
    matrix = []
    for trow in target:
        per_column = []
        for column, value in trow.items():
            measure, atol = measures[column]
            sims = measure(snapshot, column, value, atol)
            with np.errstate(divide="ignore"):
                per_column.append([None if s is None else float(-np.log(np.float32(s))) for s in sims])
        row_costs = []
        for k in range(len(snapshot)):
            cells = [col[k] for col in per_column if col[k] is not None]
            row_costs.append(float(np.float32(sum(cells) / len(cells))) if cells else math.nan)
        matrix.append(row_costs)
    cost = np.array(matrix, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        total = _best_pairing(cost)
    if total is None:
        return 0.0
    return float(np.exp(np.float32(-total / len(target))))


def _fill_zero(rows: list[Row], dtypes: dict[str, str]) -> list[Row]:
    """polars `fill_null(strategy="zero")`: numeric nulls -> 0, boolean nulls -> false, others unchanged."""
    out = []
    for row in rows:
        filled = {}
        for col, val in row.items():
            dtype = dtypes.get(col, "")
            if val is None and (dtype.startswith("Int") or dtype.startswith("Float")):
                val = 0.0 if dtype.startswith("Float") else 0
            elif val is None and dtype == "Boolean":
                val = False
            filled[col] = val
        out.append(filled)
    return out


def _key(row: Row) -> tuple:
    """Join key of a row: every cell (null cells match null cells, as the vectors show for string columns)."""
    return tuple(json.dumps(row[k], sort_keys=True) if isinstance(row[k], (list, dict)) else row[k] for k in row)


def _anti_and_inner(snapshot: list[Row], reference: list[Row]) -> tuple[list[Row], int]:
    ref_keys: dict[tuple, int] = {}
    for row in reference:
        key = _key(row)
        ref_keys[key] = ref_keys.get(key, 0) + 1
    anti, inner = [], 0
    for row in snapshot:
        hits = ref_keys.get(_key(row), 0)
        inner += hits
        if not hits:
            anti.append(row)
    return anti, inner


def addition_similarity(
    snapshot: list[Row], target: list[Row], measures: Measures, reference: list[Row], dtypes: dict[str, str]
) -> float:
    snapshot, reference, target = (
        _fill_zero(snapshot, dtypes),
        _fill_zero(reference, dtypes),
        _fill_zero(target, dtypes),
    )
    anti, inner = _anti_and_inner(snapshot, reference)
    if len(reference) != inner:
        return 0.0
    return snapshot_similarity(anti, target, measures)


def removal_similarity(
    snapshot: list[Row], target: list[Row], measures: Measures, reference: list[Row], dtypes: dict[str, str]
) -> float:
    return addition_similarity(reference, target, measures, snapshot, dtypes)


def update_similarity(
    snapshot: list[Row], target: list[Row], measures: Measures, reference: list[Row], dtypes: dict[str, str]
) -> float:
    snapshot, reference, target = (
        _fill_zero(snapshot, dtypes),
        _fill_zero(reference, dtypes),
        _fill_zero(target, dtypes),
    )
    if len(reference) != len(snapshot):
        return 0.0
    anti, _ = _anti_and_inner(snapshot, reference)
    return snapshot_similarity(anti, target, measures)


def guardrail_similarity(snapshot: list[Row], reference: list[Row]) -> float:
    return float(snapshot == reference)


# -- tool-trace extractors (README §5) -------------------------------------------------------------------------
def normalizations(value: Any) -> list[str]:
    if isinstance(value, float):
        return [f"{value:.0f}", f"{value:.1f}", f"{value:.2f}", f"{value:.3f}"]
    return [str(value)]


def _weather_temperature(trace: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        temperature = float(trace["result"]["current_temperature"])
    except (KeyError, TypeError):
        return []
    return [{"temperature": s} for s in normalizations(temperature)]


EXTRACTORS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "current_temperature_extractor": lambda t: [{"amount": float(t["result"]["current_temperature"])}],
    "days_extractor": lambda t: [{"days": int(t["result"]["days"])}],
    "lat_lon_dict_extractor": lambda t: [{k: t["result"][k] for k in ("latitude", "longitude")}],
    "min_temperature_amount_extractor": lambda t: [{"amount": float(t["result"]["min_temperature"])}],
    "min_temperature_extractor": lambda t: [{"min_temperature": s} for s in normalizations(float(t["result"]))],
    "result_to_reminder_timestamp_lowerbound_extractor": lambda t: [
        {"reminder_timestamp_lowerbound": float(t["result"])}
    ],
    "result_to_temperature_extractor": lambda t: [{"temperature": s} for s in normalizations(float(t["result"]))],
    "result_to_timestamp0_extractor": lambda t: [{"timestamp_0": float(t["result"])}],
    "result_to_timestamp1_extractor": lambda t: [{"timestamp_1": float(t["result"])}],
    "search_weather_around_lat_lon_temperature_extractor": _weather_temperature,
}


def tool_trace_dependant_similarity(
    snapshot: list[Row], target: list[Row], measures: Measures, reference: list[Row], params: dict[str, Any]
) -> float:
    """Values extracted from the reference message's tool trace, filled into the target, best match wins."""
    fill_to = params["fill_to"]
    extractor = EXTRACTORS[params["extractor"]["kind"]]
    traces = reference[0].get("tool_trace") if reference else None
    if traces is None:
        return 0.0
    extracted: list[dict[str, Any]] = []
    for raw in traces:
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            extracted.extend(extractor(json.loads(raw)))
    best = 0.0
    try:
        for values in extracted:
            if fill_to == "tool_trace":
                trace = json.loads(target[0]["tool_trace"])
                filled = []
                for candidate in trace if isinstance(trace, list) else [trace]:
                    filled.append({**candidate, "arguments": {**candidate["arguments"], **values}})
                    filled.append({**candidate, "arguments": {**values, **candidate["arguments"]}})
                new_target = [{**target[0], "tool_trace": json.dumps(filled, ensure_ascii=False)}]
            else:
                new_target = [{**target[0], "content": target[0]["content"].format(**values)}]
            best = max(best, snapshot_similarity(snapshot, new_target, measures))
    except (IndexError, KeyError):
        return 0.0
    return best


__all__ = [
    "COLUMN_MEASURES",
    "EXTRACTORS",
    "NOT_GIVEN",
    "addition_similarity",
    "guardrail_similarity",
    "is_close",
    "removal_similarity",
    "resolve_measures",
    "rouge_l",
    "snapshot_similarity",
    "tool_trace_dependant_similarity",
    "trace_matches",
    "update_similarity",
]
