"""pass^k against hand-computed values, bootstrap intervals, and the scored / infra / missing accounting."""

from __future__ import annotations

import math

import pytest

from trace_rl.stats import TaskOutcome, bootstrap_ci, pass_hat_k, pass_k_table, summarize


def test_pass_hat_k_hand_values():
    assert pass_hat_k(4, 2, 1) == 0.5
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 2, 3)


def record(task: str, trial: int, success: bool | None, *, env="toy", split="train", infra: str | None = None):
    return {
        "id": f"{env}/{split}/{task}/{trial}",
        "env": env,
        "split": split,
        "task_id": task,
        "trial": trial,
        "success": success,
        "reward": None if infra else float(bool(success)),
        "termination": "infra_error" if infra else "user_stop",
        "infra_error": infra,
        "tokens": {"prompt": 10, "completion": 2, "model_calls": 1},
        "model": "m",
        "adapter": None,
    }


def latest(records):
    return {r["id"]: r for r in records}


def test_summarize_three_tasks_three_trials():
    outcomes = {"A": [True, True, True], "B": [True, False, True], "C": [False, False, False]}
    recs = [record(t, i, s) for t, trials in outcomes.items() for i, s in enumerate(trials)]
    [g] = summarize(latest(recs), samples=200)
    assert (g.tasks, g.trials, g.expected, g.scored, g.successes, g.infra, g.missing) == (3, 3, 9, 9, 5, 0, 0)
    values = [p.value for p in g.pass_k]
    # pass^1 = (1 + 2/3 + 0)/3; pass^2 = (1 + C(2,2)/C(3,2) + 0)/3; pass^3 = (1 + 0 + 0)/3
    assert values == pytest.approx([5 / 9, 4 / 9, 1 / 3])
    assert all(p.low <= p.value <= p.high for p in g.pass_k) and all(p.tasks == 3 for p in g.pass_k)
    assert g.mean_reward == pytest.approx(5 / 9)
    assert g.prompt_tokens == 90 and g.terminations["user_stop"] == 9


def test_infra_failures_are_not_agent_failures_and_stay_counted():
    recs = [
        record("A", 0, True),
        record("A", 1, True),
        record("A", 2, True),
        record("B", 0, True),
        record("B", 1, True),
        record("B", 2, None, infra="timeout: request timed out"),
        record("C", 0, False),
        record("C", 1, None, infra="internal: RuntimeError: x"),
    ]
    plans = {"toy/train": {"env": "toy", "split": "train", "task_ids": ["A", "B", "C", "D"], "trials": 3}}
    [g] = summarize(latest(recs), plans, samples=200)
    assert (g.expected, g.scored, g.infra, g.missing) == (12, 6, 2, 4)  # D: 3 missing, C: 1 missing
    assert g.scored + g.infra + g.missing == g.expected
    assert g.success_rate == pytest.approx(5 / 6)  # the infra failures are not failures
    assert dict(g.infra_kinds) == {"timeout": 1, "internal": 1}
    p1, p2, p3 = g.pass_k
    assert p1.value == pytest.approx((1 + 1 + 0) / 3) and p1.tasks == 3  # D has no scored trial
    assert p2.value == pytest.approx((1 + 1) / 2) and p2.tasks == 2  # C has one scored trial
    assert p3.value == 1.0 and p3.tasks == 1


def test_groups_per_env_and_split_and_unplanned_records():
    recs = [record("A", 0, True), record("A", 0, False, split="test"), record("A", 5, True, env="other")]
    plans = {"other/train": {"env": "other", "split": "train", "task_ids": ["A"], "trials": 1}}
    groups = {(g.env, g.split): g for g in summarize(latest(recs), plans, samples=10)}
    assert set(groups) == {("toy", "train"), ("toy", "test"), ("other", "train")}
    assert groups[("other", "train")].extra == 1 and groups[("other", "train")].missing == 1


def test_bootstrap_is_reproducible_and_sane():
    values = [1.0] * 6 + [0.0] * 4
    a = bootstrap_ci(values, samples=500, seed=3)
    assert a == bootstrap_ci(values, samples=500, seed=3)
    assert 0.2 < a[0] < 0.6 < a[1] < 0.95
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    wide = bootstrap_ci(values[:4] + values[-4:], samples=500)
    narrow = bootstrap_ci(values * 20, samples=500)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_pass_k_table_without_tasks():
    [row] = pass_k_table([TaskOutcome("A")], 1)
    assert row.tasks == 0 and math.isnan(row.value)
