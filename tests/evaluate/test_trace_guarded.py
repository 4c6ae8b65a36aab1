"""The `trace_guarded` arm end to end on evaltoy with scripted clients: the guard plays the router and base on the
train split, drops the adapter that does worse than base where it is routed, and at test time the base model serves
the tasks routed to it; the kept adapter's tasks are unchanged; a rerun plays nothing new."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_rl.artifacts.store import JsonlStore
from trace_rl.config.evaluate import DEFAULT_ARMS, EvaluateConfig
from trace_rl.evaluate.stage import run_evaluate
from trace_rl.routing.router import ScriptedRouter

from .evaltoy import AdapterPolicy, FakeBackend, amount, make_run, trace_config

ROUTES = {"add 1 ": "cap_a", "add 2 ": "cap_b"}


def outcome(task_id: str, trial: int, adapter: str | None, system: str) -> str:
    n = amount(task_id)
    if adapter is None:
        return "ok" if n in (2, 3) else "fail"  # base solves 2 and 3
    return "ok" if adapter == "cap_a" and n == 1 else "fail"  # cap_a solves 1; cap_b breaks what base solved


def evaluate(run, policy: AdapterPolicy, **kw):
    cfg = EvaluateConfig.model_validate(
        {"arms": ["base", "trace", "trace_guarded"], "trials": 2, "concurrency": 2, "samples": 200, **kw}
    )
    return run_evaluate(
        run, trace_config(run), cfg, clients={"policy": policy}, router=ScriptedRouter(ROUTES), backend=FakeBackend()
    )


def test_the_guard_drops_the_adapter_worse_than_base_and_base_serves_its_tasks(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24, "cap_b": 30}, n_test=6, n_train=9)
    policy = AdapterPolicy(outcome)
    comparison = evaluate(run, policy, guard={"trials": 2})
    arms = {a.name: a for a in comparison.arms}
    assert arms["base"].at(1).value == pytest.approx(4 / 6, abs=1e-5)  # n = 2, 3 of six
    assert arms["trace"].at(1).value == pytest.approx(4 / 6, abs=1e-5)  # cap_a wins 1, cap_b loses 2
    assert arms["trace_guarded"].at(1).value == 1.0  # cap_a on n = 1, base on n = 2 and 3
    guard = arms["trace_guarded"].details["guard"]
    assert guard["kept"] == ["cap_a"] and guard["dropped"] == ["cap_b"]
    assert guard["selection_rollouts"] == 2 * 9 * 2
    assert arms["trace_guarded"].rollout_budget == arms["trace"].rollout_budget == 24 + 30
    verdicts = {v["adapter"]: v for v in guard["verdicts"]}
    assert verdicts["cap_a"]["delta"] == 1.0 and verdicts["cap_b"]["delta"] == -1.0

    test_file = JsonlStore(run.evaluate.path("arms/trace_guarded.jsonl")).latest()
    served = {(r["task_id"], r["adapter"]) for r in test_file.values()}
    assert served == {("test-0", "cap_a"), ("test-3", "cap_a"), ("test-1", None), ("test-4", None)} | {
        ("test-2", None),
        ("test-5", None),
    }
    notes = {r["metadata"]["route"]["note"] for r in test_file.values() if amount(r["task_id"]) == 2}
    assert notes == {"'cap_b' dropped by the held-in guard; base used"}
    train_calls = [c for c in policy.calls if c[0].startswith("train-")]
    assert {c[2] for c in train_calls} == {None, "cap_a", "cap_b"}  # the guard played the router and base

    before = len(policy.calls)
    evaluate(run, policy, guard={"trials": 2})
    assert len(policy.calls) == before  # resumed: nothing new to play

    again = evaluate(run, policy, guard={"trials": 2}, out="again")  # another evaluation of the run
    assert not [c for c in policy.calls[before:] if c[0].startswith("train-")]  # the guard's episodes are shared
    assert again.arm("trace_guarded").details["guard"]["kept"] == ["cap_a"]
    assert run.evaluation("again").path("arms/trace_guarded.jsonl").exists()
    assert not run.evaluation("again").path("guard/base.jsonl").exists()


def test_the_guard_is_skipped_when_the_train_split_is_the_one_evaluated(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24}, n_test=3, n_train=3)
    comparison = evaluate(run, AdapterPolicy(outcome), split="train")
    assert "trace_guarded" not in {a.name for a in comparison.arms}
    assert "split evaluated here" in comparison.details["skipped"]["trace_guarded"]


def test_guarded_trace_is_opt_in_and_its_guard_counts_in_the_budget_rules() -> None:
    assert "trace_guarded" not in DEFAULT_ARMS and EvaluateConfig().arms == list(DEFAULT_ARMS)
    assert EvaluateConfig(arms=["trace_guarded"]).arms == ["base", "trace_guarded"]
