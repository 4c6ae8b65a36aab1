"""`run_evaluate` end to end on a toy target with scripted clients: every arm, budget accounting, routing once per
task, the score-vs-budget curve, skipped arms with reasons, resume after a kill, and refusal to mix setups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.artifacts.evaluation import Comparison
from trace_rl.config.evaluate import EvaluateConfig
from trace_rl.errors import UserError
from trace_rl.evaluate.stage import run_evaluate
from trace_rl.routing.router import ScriptedRouter

from .evaltoy import AdapterPolicy, FakeBackend, amount, make_run, trace_config

ROUTES = {"add 1 ": "cap_a", "add 2 ": "cap_b"}
GOOD_AT = {"cap_a": 1, "cap_b": 2, "grpo_target": 1}


def outcome(task_id: str, trial: int, adapter: str | None, system: str) -> str:
    n = amount(task_id)
    if adapter is None:
        return "ok" if n == 3 or "careful" in system else "fail"
    return "ok" if GOOD_AT.get(adapter.split("_step")[0]) == n else "fail"


def reflection(prompt: object) -> str:
    return "```\nCount careful: add exactly the amount the user names.\n```"


def ecfg(**kw: object) -> EvaluateConfig:
    data = {
        "trials": 2,
        "concurrency": 2,
        "samples": 200,
        "gepa": {"val_tasks": 4, "train_tasks": 6},
        "single_best": {"tasks": 10},
        "curve": {"fractions": [0.5], "trials": 1},
        **kw,
    }
    return EvaluateConfig.model_validate(data)


def evaluate(run, cfg: EvaluateConfig, policy: AdapterPolicy, router=None, backend=None):
    return run_evaluate(
        run,
        trace_config(run),
        cfg,
        clients={"policy": policy},
        router=router or ScriptedRouter(ROUTES),
        backend=backend or FakeBackend(),
        reflection_lm=reflection,
    )


def test_every_arm_with_budgets_and_curve(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24, "cap_b": 30})
    policy, backend = AdapterPolicy(outcome), FakeBackend()
    router = ScriptedRouter(ROUTES)
    comparison = evaluate(run, ecfg(), policy, router, backend)

    assert Comparison.load(run.comparison) == comparison
    assert [a.name for a in comparison.arms] == ["base", "trace", "grpo_target", "gepa", "single_best"]
    assert "no calibrated capability environment" in comparison.details["skipped"]["multi_capability"]
    arm = {a.name: a for a in comparison.arms}
    assert arm["base"].at(1).value == pytest.approx(1 / 3)
    assert arm["trace"].at(1).value == 1.0 and arm["trace"].at(2).value == 1.0
    assert arm["trace"].at(1, diff=True).value == pytest.approx(2 / 3)
    assert arm["trace"].details["route_calls"] == 6  # once per task, not per trial or turn
    assert arm["trace"].details["routes"] == {"cap_a": 4, "cap_b": 4, "base": 4}
    assert len([c for c in router.calls if c[2] != "base"]) >= 4  # the main arm and the prefix curve point

    # budget accounting: TRACE = sum of logged training rollouts; GRPO on target matched in steps of G·K = 8
    assert arm["trace"].rollout_budget == 54
    assert backend.calls[0]["max_steps"] == 7 and backend.calls[0]["eval"] is False
    assert backend.calls[0]["first_task"].startswith("train-")  # the target's train split, never test
    assert arm["grpo_target"].rollout_budget == 56
    gepa = arm["gepa"].details["gepa"]
    assert arm["gepa"].rollout_budget == gepa["rollouts_charged"] <= gepa["budget"] == 54
    assert "careful" in arm["gepa"].details["best_candidate"]["cap_a"] and arm["gepa"].at(1).value == 1.0
    assert arm["single_best"].adapters == ["cap_a"] and arm["single_best"].rollout_budget == 24
    assert arm["single_best"].details["selection"]["selection_rollouts"] == 20
    budget = json.loads((run.root / "evaluate" / "budget.json").read_text())
    assert budget["trace_total"] == 54 and budget["arms"]["grpo_target"]["rollouts"] == 56

    curve = {(p.arm, p.budget): p.value for p in comparison.budget_curve}
    assert curve[("trace", 0)] == pytest.approx(1 / 3)
    assert curve[("trace", 24)] == pytest.approx(4 / 6)  # cap_a alone: add-2 tasks go to base
    assert curve[("trace", 54)] == 1.0
    assert ("grpo_target", 4 * 8) in curve and ("grpo_target", 56) in curve
    assert ("gepa", 27) in curve
    assert (run.root / "evaluate" / "summary.md").read_text().count("|") > 20
    versus = {d.arm: d for d in comparison.trace_versus}  # TRACE − each baseline, paired, never base
    assert list(versus) == ["grpo_target", "gepa", "single_best"]
    for name, d in versus.items():
        assert d.at(1).value == pytest.approx(arm["trace"].at(1).value - arm[name].at(1).value)
    assert "TRACE against each other arm" in (run.root / "evaluate" / "summary.md").read_text()

    # a rerun finds everything done: no episode, no training, no GEPA
    again = AdapterPolicy(outcome)
    evaluate(run, ecfg(), again, backend=(b := FakeBackend()))
    assert again.calls == [] and b.calls == []


def test_skipped_arms_are_reported_with_reasons(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {})
    comparison = evaluate(run, ecfg(), AdapterPolicy(outcome))
    assert [a.name for a in comparison.arms] == ["base"]
    skipped = comparison.details["skipped"]
    assert set(skipped) == {"trace", "grpo_target", "gepa", "single_best", "multi_capability"}
    assert "no trained capability adapters" in skipped["trace"]
    assert "no rollout budget to match" in skipped["grpo_target"]
    assert any(n.startswith("trace skipped:") for n in comparison.notes)


def test_selected_arms_and_existing_multi_adapter(tmp_path: Path) -> None:
    from .evaltoy import write_adapter

    run = make_run(tmp_path / "run", {"cap_a": 24})
    write_adapter(run.root / "adapters" / "multi", run.root / "train" / "multi", "multi", steps=3)
    policy = AdapterPolicy(outcome)
    comparison = evaluate(run, ecfg(arms=["multi_capability"], trials=1), policy)
    assert [a.name for a in comparison.arms] == ["base", "multi_capability"]  # base is always evaluated
    assert comparison.arm("multi_capability").rollout_budget == 24
    assert {c[2] for c in policy.calls} == {None, "multi"}


def test_killed_evaluate_reruns_only_what_is_missing(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24})
    evaluate(run, ecfg(arms=["base"]), AdapterPolicy(outcome))
    store = run.root / "evaluate" / "arms" / "base.jsonl"
    lines = store.read_bytes().splitlines(keepends=True)
    assert len(lines) == 12
    store.write_bytes(b"".join(lines[:5]) + lines[5][:40])  # a kill mid-append
    policy = AdapterPolicy(outcome)
    comparison = evaluate(run, ecfg(arms=["base"]), policy)
    assert len({(t, k) for t, k, _ in policy.calls}) == 7
    assert comparison.arm("base").episodes == 12 and comparison.arm("base").details["episodes"]["missing"] == 0


def test_infra_failures_are_retried_and_reported(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {})

    def flaky(task_id: str, trial: int, adapter: str | None, system: str) -> str:
        return "infra" if task_id == "test-0" else outcome(task_id, trial, adapter, system)

    comparison = evaluate(run, ecfg(arms=["base"]), AdapterPolicy(flaky))
    assert comparison.arm("base").details["episodes"]["infra"] == 2
    policy = AdapterPolicy(outcome)
    comparison = evaluate(run, ecfg(arms=["base"]), policy)
    assert {t for t, _, _ in policy.calls} == {"test-0"}
    assert comparison.arm("base").details["episodes"]["infra"] == 0


def test_a_different_setup_is_refused_not_mixed(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {})
    evaluate(run, ecfg(arms=["base"]), AdapterPolicy(outcome))
    with pytest.raises(UserError, match="different setup"):
        evaluate(run, ecfg(arms=["base"], temperature=0.5), AdapterPolicy(outcome))


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="unknown arms"):
        EvaluateConfig(arms=["nope"])
    assert EvaluateConfig(arms=["gepa", "trace"]).arms == ["base", "trace", "gepa"]
    with pytest.raises(ValueError):
        EvaluateConfig(curve={"fractions": [1.0]})


def test_a_second_split_goes_beside_the_first_with_out(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {})
    policy = AdapterPolicy(outcome)
    first = evaluate(run, ecfg(arms=["base"]), policy)
    with pytest.raises(UserError, match="different setup"):  # the same folder holds the test split
        evaluate(run, ecfg(arms=["base"], split="train"), policy)
    second = evaluate(run, ecfg(arms=["base"], split="train", out="train"), policy)
    assert (first.split, first.tasks, second.split, second.tasks) == ("test", 6, "train", 12)
    beside = run.evaluation("train")
    assert beside.folder == run.root / "evaluate@train"
    assert Comparison.load(beside.comparison).split == "train" and beside.summary.exists()
    assert Comparison.load(run.evaluate.comparison).split == "test"  # the first evaluation is untouched
    assert {"evaluate", "evaluate@train"} <= set(run.manifest().stages)
    with pytest.raises(ValueError):
        EvaluateConfig(out="../elsewhere")


def test_trace_curve_point_from_the_adapters_kept_checkpoints(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24, "cap_b": 24})  # 3 steps each, 8 rollouts a step
    # cap_a: the copy the train stage kept (train.keep_fractions), beside a torn Trainer checkpoint of the same step;
    # cap_b: only the Trainer's checkpoint (runs trained before keep_fractions)
    for folder, complete in (
        (run.root / "train" / "cap_a" / "kept" / "step-2", False),  # round(0.5 · 3) = 2
        (run.root / "train" / "cap_a" / "checkpoints" / "checkpoint-2", False),
        (run.root / "train" / "cap_b" / "checkpoints" / "checkpoint-2", True),
    ):
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
        (folder / "adapter_model.safetensors").write_bytes(b"fake")
        if complete:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (run.root / "train" / "cap_b" / "checkpoints" / "checkpoint-1").mkdir()  # incomplete: never used
    policy = AdapterPolicy(outcome)
    comparison = evaluate(run, ecfg(arms=["trace"]), policy)

    by_series = {(p.series, p.budget): p.value for p in comparison.budget_curve if p.arm == "trace"}
    assert by_series[("checkpoints", 32)] == 1.0  # both adapters at step 2: 16 + 16 rollouts, the same routes
    assert by_series[("capability prefixes", 24)] == pytest.approx(4 / 6)
    assert {("", 0), ("", 48)} <= set(by_series)
    served = {a for _, _, a in policy.calls}
    assert {"cap_a_step2", "cap_b_step2", "cap_a", "cap_b", None} == served
    records = [json.loads(line) for line in (run.root / "evaluate" / "curve" / "trace@steps2-2.jsonl").open()]
    assert {r["adapter"] for r in records} == {"cap_a_step2", "cap_b_step2", None}
    assert "trace (checkpoints) @ 32" in (run.root / "evaluate" / "summary.md").read_text()


def test_no_trace_checkpoint_point_without_checkpoints_at_the_fraction(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", {"cap_a": 24, "cap_b": 24})
    folder = run.root / "train" / "cap_a" / "checkpoints" / "checkpoint-2"  # cap_b kept none
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (folder / "adapter_model.safetensors").write_bytes(b"fake")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    comparison = evaluate(run, ecfg(arms=["trace"]), AdapterPolicy(outcome))
    assert not [p for p in comparison.budget_curve if p.series == "checkpoints"]
    assert not (run.root / "evaluate" / "curve" / "trace@steps2-2.jsonl").exists()
