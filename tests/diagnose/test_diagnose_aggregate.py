"""ER+, ER−, Δ, Cov and the K-of-N rule against hand-computed examples (TRACE §3.3), NA and empty denominators."""

from __future__ import annotations

import math

import pytest

from trace_rl.artifacts.capabilities import Label
from trace_rl.diagnose.aggregate import aggregate, aggregate_capability, run_stats

L, P, N = Label.LACKING, Label.PRESENT, Label.NA


def _outcomes(n_pass: int, n_fail: int) -> dict[str, bool]:
    return {**{f"p{i}": True for i in range(n_pass)}, **{f"f{i}": False for i in range(n_fail)}}


def test_run_stats_hand_computed_with_na():
    # successes: L, P, NA, P  -> ER+ = 1 / 3 (the NA success leaves the denominator)
    # failures:  L, L, P, NA, NA, L -> ER− = 3 / 4; Cov = 3 / 6 (NA failures stay in |D−|)
    outcomes = _outcomes(4, 6)
    labels = {"p0": L, "p1": P, "p2": N, "p3": P, "f0": L, "f1": L, "f2": P, "f3": N, "f4": N, "f5": L}
    s = run_stats(labels, outcomes)
    assert s.er_pos == pytest.approx(1 / 3)
    assert s.er_neg == pytest.approx(3 / 4)
    assert s.delta == pytest.approx(3 / 4 - 1 / 3)
    assert s.cov == pytest.approx(0.5)
    assert (s.lacking_passed, s.applicable_passed, s.lacking_failed, s.applicable_failed) == (1, 3, 3, 4)
    assert (s.n_passed, s.n_failed) == (4, 6)
    assert s.passed and s.empty == []


def test_gap_below_delta_fails_even_with_high_coverage():
    # capability lacking everywhere (ambiguity / label noise): Cov high, Δ = 0 -> rejected
    outcomes = _outcomes(5, 5)
    s = run_stats(dict.fromkeys(outcomes, L), outcomes)
    assert (s.er_pos, s.er_neg, s.delta, s.cov) == (1.0, 1.0, 0.0, 1.0)
    assert not s.passed


def test_coverage_below_rho_fails_even_with_a_large_gap():
    # 1 of 20 failures lacking, only that one applicable: ER− = 1, Δ = 1, Cov = 0.05 < 0.10
    outcomes = _outcomes(5, 20)
    labels = {"f0": L, **{f"p{i}": P for i in range(5)}}
    s = run_stats(labels, outcomes)
    assert s.delta == pytest.approx(1.0)
    assert s.cov == pytest.approx(0.05)
    assert not s.passed
    assert s.missing == 19  # unlabeled failures count as NA


def test_thresholds_are_inclusive_despite_float_rounding():
    # Δ = 0.3 − 0.1 is 0.19999999999999998 in floating point; Cov = 1 / 10 = 0.1 exactly at ρ
    outcomes = _outcomes(10, 10)
    labels = {"p0": L, **{f"p{i}": P for i in range(1, 10)}}
    labels |= {"f0": L, "f1": L, "f2": L, **{f"f{i}": P for i in range(3, 10)}}
    s = run_stats(labels, outcomes)
    assert s.delta == pytest.approx(0.2)
    assert s.passed
    labels2 = {"f0": L, **{f"f{i}": P for i in range(1, 5)}, **{f"f{i}": N for i in range(5, 10)}}
    s2 = run_stats(labels2, outcomes)  # ER− = 1/5 = 0.2, Cov = 0.1, no applicable success
    assert (s2.er_neg, s2.cov) == (pytest.approx(0.2), pytest.approx(0.1))
    assert s2.passed


def test_empty_denominators_are_zero_and_reported():
    outcomes = _outcomes(3, 2)
    s = run_stats({"f0": L, "f1": P, "p0": N, "p1": N, "p2": N}, outcomes)  # no non-NA success
    assert s.er_pos == 0.0 and "er_pos" in s.empty
    assert s.er_neg == 0.5 and s.delta == 0.5
    s = run_stats({"p0": L}, _outcomes(3, 0))  # no failures at all
    assert (s.er_neg, s.cov) == (0.0, 0.0)
    assert set(s.empty) == {"er_neg", "cov"}
    assert not s.passed
    stats = aggregate_capability("c", [{"f0": {"c": L}, "f1": {"c": P}}], outcomes, k=1)
    assert any("ER+ = 0 by definition" in w for w in stats.warnings)
    assert any("unlabeled trajectories counted as NA" in w for w in stats.warnings)


def _run(lacking_failed: int, outcomes: dict[str, bool], name: str = "c") -> dict[str, dict[str, Label]]:
    """A run where `lacking_failed` of the failures lack `name`, the other failures and all successes have it."""
    out = {}
    fails = [t for t, ok in outcomes.items() if not ok]
    for t, ok in outcomes.items():
        out[t] = {name: L if (not ok and fails.index(t) < lacking_failed) else P}
    return out


def test_k_of_n_rule_eight_of_ten():
    outcomes = _outcomes(10, 10)
    # passing run: 3 of 10 failures lacking -> ER− = 0.3, Δ = 0.3, Cov = 0.3; failing run: 1 -> Δ = Cov = 0.1
    eight = [_run(3, outcomes)] * 8 + [_run(1, outcomes)] * 2
    seven = [_run(3, outcomes)] * 7 + [_run(1, outcomes)] * 3
    s8 = aggregate_capability("c", eight, outcomes, k=8)
    s7 = aggregate_capability("c", seven, outcomes, k=8)
    assert (s8.runs_passed, s8.selected) == (8, True)
    assert (s7.runs_passed, s7.selected) == (7, False)
    # mean Δ = (8·0.3 + 2·0.1) / 10 = 0.26; population std = sqrt(0.8·0.04² + 0.2·0.16²) = 0.08
    assert s8.delta_mean == pytest.approx(0.26)
    assert s8.delta_std == pytest.approx(math.sqrt(0.8 * 0.04**2 + 0.2 * 0.16**2))
    assert s8.delta_std == pytest.approx(0.08)
    assert s8.cov_mean == pytest.approx(0.26)
    body = s8.as_stats(10, 8)
    assert [r["passed"] for r in body["per_run"]] == [True] * 8 + [False] * 2
    assert body["runs_passed"] == 8 and body["n_runs"] == 10 and body["k"] == 8


def test_ranking_by_mean_delta_and_examples_by_consistency():
    outcomes = _outcomes(4, 4)
    runs = []
    for r in range(3):
        row: dict[str, dict[str, Label]] = {}
        for t, ok in outcomes.items():
            row[t] = {
                "weak": L if t == "f0" else P,  # Δ = 0.25
                "strong": L if (not ok and t != "f3") else P,  # Δ = 0.75
                "flaky": L if (t == "f1" or (r == 0 and t == "f2")) else P,  # f1 lacking in 3 runs, f2 in 1
            }
        runs.append(row)
    stats = aggregate(["weak", "flaky", "strong"], runs, outcomes, k=2, max_examples=8)
    assert [s.name for s in stats] == ["strong", "flaky", "weak"]
    flaky = stats[1]
    assert flaky.example_failed_ids == ["f1", "f2"]  # most runs first
    assert flaky.lacking_counts == {"f1": 3, "f2": 1}
    assert stats[0].example_failed_ids == ["f0", "f1", "f2"]
    with pytest.raises(ValueError, match="k"):
        aggregate(["weak"], runs, outcomes, k=4)


def test_every_lacking_failure_is_evidence_not_only_the_examples():
    """The synthesize stage reads its evidence from `lacking_failed_runs`: every failed trajectory labelled LACKING,
    most runs first, not only the first `max_examples` in id order (whose families would depend on how ids sort)."""
    outcomes = _outcomes(0, 6)
    runs = [{t: {"c": L} for t in outcomes}, {t: {"c": L if t in ("f4", "f5") else P} for t in outcomes}]
    body = aggregate(["c"], runs, outcomes, k=1, max_examples=2)[0].as_stats(2, 1)
    assert body["example_failed_trajectory_ids"] == ["f4", "f5"]
    assert list(body["lacking_failed_runs"]) == ["f4", "f5", "f0", "f1", "f2", "f3"]
    assert body["lacking_failed_runs"]["f4"] == 2 and body["lacking_failed_runs"]["f0"] == 1
