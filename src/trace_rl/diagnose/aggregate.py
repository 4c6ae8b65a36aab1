"""Selection statistics and the K-of-N rule of TRACE §3.3, as pure functions over label matrices.

For one labeling run, capability c, trajectories i with labels ℓ_i ∈ {NA, PRESENT, LACKING} and success y_i ∈ {0, 1}:

    ER+(c) = #{ℓ_i = LACKING ∧ y_i = 1} / #{ℓ_i ≠ NA ∧ y_i = 1}       error rate on successes
    ER−(c) = #{ℓ_i = LACKING ∧ y_i = 0} / #{ℓ_i ≠ NA ∧ y_i = 0}       error rate on failures
    Δ(c)   = ER−(c) − ER+(c)                                          contrastive gap
    Cov(c) = #{ℓ_i = LACKING ∧ y_i = 0} / |D−|                        D− = all failed trajectories (NA ones included)
    c passes the run  ⇔  Δ(c) ≥ δ  and  Cov(c) ≥ ρ                     (ρ = 0.10, δ = 0.20)

Across N runs, c is selected when it passes in at least K runs (K = 8 of N = 10); selected capabilities are ranked by
mean Δ (descending; ties by mean Cov, then name), as the paper's released aggregation does.

Choices the paper leaves open (docs/method-notes.md §1), made here:
- Empty denominators: ER+ = 0 when no success is labeled non-NA, ER− = 0 when no failure is, Cov = 0 when there are
  no failures; each such case adds a warning naming the capability and runs. Consequence: with no applicable successes
  Δ = ER−, i.e. the contrast degrades to the failure error rate, which the warning makes visible.
- A trajectory missing from a run's labels counts as NA for that run, with a warning (the stage validates completeness
  first, so this only happens when the function is called directly).
- Minimum support: when fewer than `MIN_SUPPORT` (5) successes are labeled non-NA for a capability, a warning says
  its Δ rests on that many (`stats.support` holds the smallest applicable counts over the runs).
- Thresholds are compared with a 1e-9 tolerance so that e.g. Δ = 0.3 − 0.1 passes δ = 0.2 despite rounding.
- mean/std are over the N runs; std is the population std (ddof = 0), as numpy's default in the released code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trace_rl.artifacts.capabilities import Label, LabelMatrix

EPS = 1e-9
MIN_SUPPORT = 5
"""Fewer applicable successes than this behind an ER+ makes Δ a weak contrast: a warning says so."""


@dataclass
class RunStats:
    """One capability in one labeling run."""

    er_pos: float
    er_neg: float
    delta: float
    cov: float
    passed: bool
    lacking_passed: int  # LACKING ∧ y = 1
    applicable_passed: int  # ≠ NA ∧ y = 1
    lacking_failed: int  # LACKING ∧ y = 0
    applicable_failed: int  # ≠ NA ∧ y = 0
    n_passed: int  # |D+|
    n_failed: int  # |D−|
    empty: list[str] = field(default_factory=list)  # which quantities had an empty denominator: er_pos, er_neg, cov
    missing: int = 0  # trajectories without a label in this run (counted NA)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CapabilityStats:
    """One capability across N runs."""

    name: str
    runs: list[RunStats]
    runs_passed: int
    selected: bool
    delta_mean: float
    delta_std: float
    cov_mean: float
    cov_std: float
    er_pos_mean: float
    er_neg_mean: float
    example_failed_ids: list[str]
    lacking_counts: dict[str, int]  # failed trajectory id -> runs in which it was LACKING
    warnings: list[str]

    def as_stats(self, n_runs: int, k: int) -> dict[str, Any]:
        """The `stats` dict stored on `Capability` in capabilities.json."""
        return {
            "delta_mean": self.delta_mean,
            "delta_std": self.delta_std,
            "cov_mean": self.cov_mean,
            "cov_std": self.cov_std,
            "er_pos_mean": self.er_pos_mean,
            "er_neg_mean": self.er_neg_mean,
            "runs_passed": self.runs_passed,
            "support": {
                "passed": min(r.applicable_passed for r in self.runs),
                "failed": min(r.applicable_failed for r in self.runs),
            },
            "n_runs": n_runs,
            "k": k,
            "per_run": [
                {
                    "run": i,
                    "delta": r.delta,
                    "cov": r.cov,
                    "er_pos": r.er_pos,
                    "er_neg": r.er_neg,
                    "passed": r.passed,
                    "lacking_failed": r.lacking_failed,
                    "applicable_failed": r.applicable_failed,
                    "lacking_passed": r.lacking_passed,
                    "applicable_passed": r.applicable_passed,
                    "n_failed": r.n_failed,
                    "n_passed": r.n_passed,
                    "empty_denominators": r.empty,
                }
                for i, r in enumerate(self.runs)
            ],
            "example_failed_trajectory_ids": self.example_failed_ids,
            # every failed trajectory labelled LACKING (the examples are only the first few, in id order): the
            # synthesize stage's evidence, whose families must not depend on how task ids sort
            "lacking_failed_runs": {
                tid: self.lacking_counts[tid]
                for tid in sorted(self.lacking_counts, key=lambda t: (-self.lacking_counts[t], t))
            },
        }


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def run_stats(
    labels: Mapping[str, Label], outcomes: Mapping[str, bool], *, rho: float = 0.10, delta: float = 0.20
) -> RunStats:
    """ER+, ER−, Δ, Cov and pass/fail of one capability in one run.

    `labels`: trajectory id -> label for this capability; `outcomes`: trajectory id -> success (the diagnosed set D;
    labels for ids outside it are ignored).
    """
    lp = ap = lf = af = n_pass = n_fail = missing = 0
    for tid, success in outcomes.items():
        label = labels.get(tid)
        if label is None:
            missing += 1
            label = Label.NA
        if success:
            n_pass += 1
            ap += label != Label.NA
            lp += label == Label.LACKING
        else:
            n_fail += 1
            af += label != Label.NA
            lf += label == Label.LACKING
    empty = []
    er_pos, er_neg, cov = _ratio(lp, ap), _ratio(lf, af), _ratio(lf, n_fail)
    if er_pos is None:
        empty.append("er_pos")
    if er_neg is None:
        empty.append("er_neg")
    if cov is None:
        empty.append("cov")
    er_pos, er_neg, cov = er_pos or 0.0, er_neg or 0.0, cov or 0.0
    gap = er_neg - er_pos
    passed = gap >= delta - EPS and cov >= rho - EPS
    return RunStats(
        er_pos=er_pos,
        er_neg=er_neg,
        delta=gap,
        cov=cov,
        passed=passed,
        lacking_passed=lp,
        applicable_passed=ap,
        lacking_failed=lf,
        applicable_failed=af,
        n_passed=n_pass,
        n_failed=n_fail,
        empty=empty,
        missing=missing,
    )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    if not xs:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


_EMPTY_TEXT = {
    "er_pos": "no successful trajectory is labeled non-NA: ER+ = 0 by definition",
    "er_neg": "no failed trajectory is labeled non-NA: ER− = 0 by definition",
    "cov": "no failed trajectories: Cov = 0 by definition",
}


def _run_list(runs: Sequence[int], n: int) -> str:
    return "all runs" if len(runs) == n else "runs " + ", ".join(map(str, runs))


def aggregate_capability(
    name: str,
    runs: Sequence[LabelMatrix],
    outcomes: Mapping[str, bool],
    *,
    rho: float = 0.10,
    delta: float = 0.20,
    k: int = 8,
    max_examples: int = 8,
) -> CapabilityStats:
    """One capability over N runs: per-run stats, K-of-N selection, mean/std, example failed trajectories."""
    if not runs:
        raise ValueError("aggregate needs at least one labeling run")
    per_run = [
        run_stats({tid: row[name] for tid, row in matrix.items() if name in row}, outcomes, rho=rho, delta=delta)
        for matrix in runs
    ]
    warnings = []
    for key, text in _EMPTY_TEXT.items():
        hit = [i for i, r in enumerate(per_run) if key in r.empty]
        if hit:
            warnings.append(f"{name}: {text} ({_run_list(hit, len(per_run))})")
    low = [i for i, r in enumerate(per_run) if 0 < r.applicable_passed < MIN_SUPPORT]
    if low:
        n = min(per_run[i].applicable_passed for i in low)
        warnings.append(
            f"{name}: Δ rests on {n} successful trajectories it applies to (fewer than {MIN_SUPPORT}): weak contrast, "
            f"read its coverage rather than its Δ ({_run_list(low, len(per_run))})"
        )
    missing = [i for i, r in enumerate(per_run) if r.missing]
    if missing:
        warnings.append(f"{name}: unlabeled trajectories counted as NA ({_run_list(missing, len(per_run))})")
    counts: dict[str, int] = {}
    for matrix in runs:
        for tid, row in matrix.items():
            if tid in outcomes and not outcomes[tid] and row.get(name) == Label.LACKING:
                counts[tid] = counts.get(tid, 0) + 1
    examples = sorted(counts, key=lambda t: (-counts[t], t))[:max_examples]
    passed = sum(r.passed for r in per_run)
    deltas, covs = [r.delta for r in per_run], [r.cov for r in per_run]
    return CapabilityStats(
        name=name,
        runs=per_run,
        runs_passed=passed,
        selected=passed >= k,
        delta_mean=_mean(deltas),
        delta_std=_std(deltas),
        cov_mean=_mean(covs),
        cov_std=_std(covs),
        er_pos_mean=_mean([r.er_pos for r in per_run]),
        er_neg_mean=_mean([r.er_neg for r in per_run]),
        example_failed_ids=examples,
        lacking_counts=counts,
        warnings=warnings,
    )


def rank(stats: Sequence[CapabilityStats]) -> list[CapabilityStats]:
    """Mean Δ descending, then mean Cov descending, then name."""
    return sorted(stats, key=lambda s: (-s.delta_mean, -s.cov_mean, s.name))


def aggregate(
    names: Sequence[str],
    runs: Sequence[LabelMatrix],
    outcomes: Mapping[str, bool],
    *,
    rho: float = 0.10,
    delta: float = 0.20,
    k: int = 8,
    max_examples: int = 8,
) -> list[CapabilityStats]:
    """Every capability, ranked; `[s for s in result if s.selected]` is C* in rank order."""
    if k > len(runs):
        raise ValueError(f"k ({k}) exceeds the number of labeling runs ({len(runs)})")
    return rank(
        [aggregate_capability(n, runs, outcomes, rho=rho, delta=delta, k=k, max_examples=max_examples) for n in names]
    )


__all__ = ["CapabilityStats", "RunStats", "aggregate", "aggregate_capability", "rank", "run_stats"]
