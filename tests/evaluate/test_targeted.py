"""The targeted table on evaltoy (families add1/add2/add3): each adapter alone on the test tasks (single_best with
select=test, whose chosen adapter's arm is its selection file, not a second evaluation), its paired gain over base on
the families of its evidence tasks against the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.evaluate.stage import run_evaluate
from trace_rl.routing.router import ScriptedRouter

from .evaltoy import AdapterPolicy, FakeBackend, amount, make_run, trace_config


def outcome(task_id: str, trial: int, adapter: str | None, system: str) -> str:
    n = amount(task_id)
    if adapter is None:
        return "ok" if n == 3 else "fail"
    if adapter == "cap_a":
        return "ok" if n in (1, 3) else "fail"  # gains on its own family (add1), harms nothing
    return "ok" if n == 2 else "fail"  # cap_b gains on add2 and breaks add3, which base solved


def test_each_adapter_gain_on_its_own_families_against_the_rest(tmp_path: Path) -> None:
    evidence = {"cap_a": ["train-0", "train-3"], "cap_b": ["train-1"]}  # add1; add2
    run = make_run(tmp_path / "run", {"cap_a": 24, "cap_b": 24}, n_test=6, n_train=6, evidence=evidence)
    policy = AdapterPolicy(outcome)
    cfg = EvaluateConfig.model_validate(
        {"arms": ["base", "single_best"], "trials": 2, "samples": 200, "single_best": {"select": "test"}}
    )
    comparison = run_evaluate(
        run, trace_config(run), cfg, clients={"policy": policy}, router=ScriptedRouter({}), backend=FakeBackend()
    )
    rows = {r.adapter: r for r in comparison.targeted}
    assert rows["cap_a"].own_families == ["add1"] and rows["cap_b"].own_families == ["add2"]
    assert rows["cap_a"].own.value == pytest.approx(1.0) and rows["cap_a"].own.tasks == 2
    assert rows["cap_a"].others.value == pytest.approx(0.0) and rows["cap_a"].others.tasks == 4
    assert rows["cap_b"].own.value == pytest.approx(1.0)
    assert rows["cap_b"].others.value == pytest.approx(-0.5)  # add1 unchanged, add3 lost
    assert "Targeted" in run.evaluate.summary.read_text()

    best = comparison.arm("single_best")
    assert best.adapters == ["cap_a"] and best.details["selection"]["leaks_test"]
    assert not run.evaluate.path("arms/single_best.jsonl").exists()  # the selection file is the arm's
    test_calls = [c for c in policy.calls if c[0].startswith("test-") and c[2] == "cap_a"]
    assert len({(c[0], c[1]) for c in test_calls}) == 6 * 2
    assert len(test_calls) == 6 * 2 * 2  # each episode once: a call and the reply after the tool result


def test_no_targeted_table_without_adapters_evaluated_alone(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24}, n_test=3, n_train=3, evidence={"cap_a": ["train-0"]})
    cfg = EvaluateConfig.model_validate({"arms": ["base", "single_best"], "trials": 1, "samples": 50})
    comparison = run_evaluate(
        run, trace_config(run), cfg, clients={"policy": AdapterPolicy(outcome)}, backend=FakeBackend()
    )
    assert comparison.targeted == []  # select=train: the adapters played train tasks, not these
