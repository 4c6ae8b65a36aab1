"""Paired differences to base and pass^k rows, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from trace_rl.evaluate.compare import arm_result, family_table, markdown_table, paired_bootstrap, summarize_records


def test_paired_bootstrap_constant_difference_is_exact() -> None:
    d = paired_bootstrap([0.1, 0.6, 1.0, 0.3], [0.0, 0.5, 0.9, 0.2], samples=500)
    assert d.tasks == 4
    assert d.value == pytest.approx(0.1) and d.low == pytest.approx(0.1) and d.high == pytest.approx(0.1)


def test_paired_bootstrap_two_tasks_spans_the_extremes() -> None:
    # per-task differences 0 and 1: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4, so with many
    # resamples the 2.5% and 97.5% percentiles are exactly 0 and 1, and the mean is 0.5
    d = paired_bootstrap([1.0, 1.0], [1.0, 0.0], samples=4000, seed=3)
    assert (d.value, d.low, d.high, d.tasks) == (0.5, 0.0, 1.0, 2)


def test_paired_bootstrap_edge_cases() -> None:
    assert math.isnan(paired_bootstrap([], []).value)
    one = paired_bootstrap([0.75], [0.25])
    assert (one.value, one.low, one.high) == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])


def _records(arm: str, successes: dict[str, list[bool]]) -> dict[str, dict]:
    out = {}
    for task, results in successes.items():
        for trial, ok in enumerate(results):
            key = f"toy/test/{task}/{trial}"
            out[key] = {
                "id": key,
                "env": "toy",
                "split": "test",
                "task_id": task,
                "trial": trial,
                "reward": float(ok),
                "success": ok,
                "infra_error": None,
                "termination": "user_stop",
                "model": arm,
            }
    return out


def test_pass_k_and_paired_difference_by_hand() -> None:
    # base: t1 2/3, t2 0/3; arm: t1 3/3, t2 1/3
    # pass^1: base (2/3 + 0)/2 = 1/3, arm (1 + 1/3)/2 = 2/3, Δ = 1/3
    # pass^2: base (C(2,2)/C(3,2) + 0)/2 = 1/6, arm (1 + 0)/2 = 1/2, Δ = 1/3
    # pass^3: base 0, arm 1/2, Δ = 1/2
    base = summarize_records(
        _records("b", {"t1": [True, True, False], "t2": [False] * 3}),
        "toy",
        "test",
        ["t1", "t2"],
        3,
        samples=200,
        seed=0,
        level=0.95,
    )
    arm = summarize_records(
        _records("a", {"t1": [True] * 3, "t2": [False, True, False]}),
        "toy",
        "test",
        ["t1", "t2"],
        3,
        samples=200,
        seed=0,
        level=0.95,
    )
    result = arm_result("trace", arm, base, samples=200, seed=0, level=0.95, budget=40, adapters=["x"])
    assert [round(r.value, 6) for r in result.pass_k] == [round(2 / 3, 6), 0.5, 0.5]
    assert [round(r.value, 6) for r in result.diff_to_base] == [round(1 / 3, 6), round(1 / 3, 6), 0.5]
    assert all(r.tasks == 2 for r in result.diff_to_base)
    # two tasks with Δpass^1 = 1/3 and 1/3: every resample gives 1/3
    first = result.at(1, diff=True)
    assert first.low == pytest.approx(1 / 3) and first.high == pytest.approx(1 / 3)
    assert result.rollout_budget == 40 and result.episodes == 6
    base_row = arm_result("base", base, base, samples=200, seed=0, level=0.95)
    assert base_row.diff_to_base == [] and base_row.at(1).value == pytest.approx(1 / 3)
    table = markdown_table([base_row, result], 3, {"gepa": "no reflection model"})
    assert "| TRACE (routed adapters) | 66.7 [" in table and "+33.3 [33.3, 33.3]" in table
    assert "| GEPA (prompt optimisation) | skipped | skipped | skipped | no reflection model | — |" in table


def test_missing_and_infra_episodes_are_counted_not_scored() -> None:
    records = _records("b", {"t1": [True, False], "t2": [True]})
    records["toy/test/t2/1"] = {
        **records["toy/test/t2/0"],
        "id": "toy/test/t2/1",
        "trial": 1,
        "success": None,
        "infra_error": "timeout: slow",
    }
    group = summarize_records(records, "toy", "test", ["t1", "t2", "t3"], 2, samples=50, seed=0, level=0.95)
    assert (group.scored, group.infra, group.missing) == (3, 1, 2)
    assert group.pass_k[1].tasks == 1  # only t1 has two scored trials


def test_per_family_pass_k_and_paired_difference_by_hand() -> None:
    # family a: t1, t2; family b: t3.  base: t1 1/2, t2 0/2, t3 2/2; arm: t1 2/2, t2 1/2, t3 0/2
    # pass^1 a: base 1/4, arm 3/4, Δ +1/2; b: base 1, arm 0, Δ −1.  pass^2 a: base 0, arm 1/2; b: base 1, arm 0
    tasks = ["t1", "t2", "t3"]
    common = {"samples": 200, "seed": 0, "level": 0.95}
    base = summarize_records(
        _records("b", {"t1": [True, False], "t2": [False] * 2, "t3": [True] * 2}), "toy", "test", tasks, 2, **common
    )
    arm = summarize_records(
        _records("a", {"t1": [True] * 2, "t2": [False, True], "t3": [False] * 2}), "toy", "test", tasks, 2, **common
    )
    families = {"t1": "a", "t2": "a", "t3": "b"}
    trace = arm_result("trace", arm, base, families=families, **common)
    base_row = arm_result("base", base, base, families=families, **common)
    a, b = trace.by_family
    assert (a.family, a.tasks, b.family, b.tasks) == ("a", 2, "b", 1)
    assert [r.value for r in a.pass_k] == [0.75, 0.5] and [r.value for r in b.pass_k] == [0.0, 0.0]
    assert [r.value for r in a.diff_to_base] == [0.5, 0.5] and [r.value for r in b.diff_to_base] == [-1.0, -1.0]
    assert a.at(1).low <= 0.75 <= a.at(1).high and a.at(1, diff=True).tasks == 2
    assert base_row.by_family[0].diff_to_base == [] and base_row.by_family[0].at(1).value == 0.25
    table = family_table([base_row, trace])
    assert (
        "| a | 2 | 25.0 [" in table
        and "+50.0 [" in table
        and "| b | 1 | 100.0 [100.0, 100.0] | 0.0 [0.0, 0.0] | -100.0 [-100.0, -100.0] |" in table
    )
    assert family_table([arm_result("trace", arm, base, **common)]) == ""  # tasks without families: no table


def test_trace_against_each_other_arm_is_paired_by_hand() -> None:
    # trace: t1 3/3, t2 1/3; grpo_target: t1 1/3, t2 1/3; gepa: t1 3/3, t2 3/3
    # TRACE − GRPO pass^1: (1 − 1/3 + 0)/2 = 1/3; pass^3: (1 − 0 + 0 − 0)/2 = 1/2
    # TRACE − GEPA pass^1: (0 + 1/3 − 1)/2 = −1/3; pass^3: (0 + 0 − 1)/2 = −1/2
    from trace_rl.evaluate.compare import trace_versus, versus_table

    def group(successes: dict[str, list[bool]]):
        return summarize_records(
            _records("x", successes), "toy", "test", ["t1", "t2"], 3, samples=200, seed=0, level=0.95
        )

    base = group({"t1": [False] * 3, "t2": [False] * 3})
    trace = group({"t1": [True] * 3, "t2": [True, False, False]})
    grpo = group({"t1": [True, False, False], "t2": [False, True, False]})
    gepa = group({"t1": [True] * 3, "t2": [True] * 3})
    assert trace_versus({"base": base, "grpo_target": grpo}, 3, samples=200, seed=0, level=0.95) == []
    diffs = trace_versus(
        {"base": base, "trace": trace, "grpo_target": grpo, "gepa": gepa}, 3, samples=200, seed=0, level=0.95
    )
    assert [d.arm for d in diffs] == ["grpo_target", "gepa"]  # never base, never TRACE itself
    grpo_diff, gepa_diff = diffs
    assert grpo_diff.at(1).value == pytest.approx(1 / 3) and grpo_diff.at(3).value == pytest.approx(0.5)
    assert gepa_diff.at(1).value == pytest.approx(-1 / 3) and gepa_diff.at(3).value == pytest.approx(-0.5)
    assert gepa_diff.at(1).low <= -1 / 3 <= gepa_diff.at(1).high and gepa_diff.at(1).tasks == 2
    table = versus_table(diffs, 3)
    assert "| GRPO on target | +33.3 [" in table and "| GEPA (prompt optimisation) | −33.3" not in table
    assert "| GEPA (prompt optimisation) | -33.3 [" in table
