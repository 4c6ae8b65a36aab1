"""The synthesize stage on the library, offline: every selected capability gets a validated environment from the
target; calibration with a scripted policy accepts or, out of range after the attempts, marks `needs_attention`;
the figures land in calibration.json; test-split evidence is never used; a finished folder is skipped on rerun."""

from __future__ import annotations

import pytest

from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.envs.registry import load_domain
from trace_rl.envs.synthetic import load_capability_env
from trace_rl.errors import UserError
from trace_rl.synthesize.stage import run_synthesize

from .synth_helpers import LIBRARY_CAPABILITIES, OraclePolicy, make_library_run, read_json

SMALL = {"validation_seeds": 6, "train_seeds": 24, "test_seeds": 6, "concurrency": 4, "leak_sample": 4}


@pytest.mark.parametrize(
    ("library_tasks", "kind"), [("decisions", "library_decisions"), ("variants", "library_variants")]
)
def test_every_library_capability_gets_a_valid_environment(tmp_path, library_tasks, kind):
    run = make_library_run(tmp_path / "run", list(LIBRARY_CAPABILITIES))
    syn = SynthesizeConfig(calibrate=False, library_tasks=library_tasks, **SMALL)
    report = run_synthesize(run, None, {}, syn=syn)
    assert set(report["capabilities"]) == set(LIBRARY_CAPABILITIES)
    for name in LIBRARY_CAPABILITIES:
        folder = run.root / "envs" / name
        assert report["capabilities"][name]["status"] == "ready"
        validation = read_json(folder / "validation.json")["attempts"][-1]
        assert validation["ok"] and validation["n_valid"] == 6 and validation["capability_sensitivity"] == 1.0
        leak = read_json(folder / "leak.json")
        assert leak["ok"] and leak["checked"]["tasks"] > 0 and leak["index_counts"]["name"] > 0
        spec = read_json(folder / "spec.json")
        assert spec["generator"]["kind"] == kind
        assert spec["evidence"]["capability_type"] == name
        assert any("test" in d for d in spec["evidence"]["dropped"])  # the test-split trajectory was refused
        assert all("/train/" in t for t in spec["evidence"]["trajectory_ids"])
        env = load_capability_env(folder)
        assert env.status == "ready" and env.make_task(0).id == f"{name}-0"
    assert (run.root / "synthesize" / "summary.json").exists()
    caps = read_json(run.root / "synthesize" / "capabilities.json")["capabilities"]
    assert {c["status"] for c in caps} == {"synthesized"} and len(caps) == 4
    assert "<expert_guidance>" in (run.root / "envs" / name / "system_prompt.md").read_text()
    assert run.manifest().stages["synthesize"].status == "done"


def test_calibration_accepts_and_rerun_skips(tmp_path):
    name = "tool_calling_precision"
    run = make_library_run(tmp_path / "run", [name])
    folder = run.root / "envs" / name
    policy = OraclePolicy(lambda: folder, 0.3, target=load_domain("library"))
    syn = SynthesizeConfig(groups=6, samples=4, **SMALL)
    report = run_synthesize(run, None, {"policy": policy}, syn=syn)
    assert report["capabilities"][name]["status"] == "ready"
    cal = read_json(folder / "calibration.json")
    fig = cal["final"]["figures"]
    assert cal["accepted"] and cal["final"]["accepted"]
    for key in ("mean_reward", "success_rate", "reward_std", "informative_groups", "constant_groups", "pass_at_k"):
        assert key in fig
    assert 0.2 <= fig["mean_reward"] <= 0.6 and 0.2 <= fig["success_rate"] <= 0.6
    assert fig["n_rollouts"] == 24 and set(fig["pass_at_k"]) == {"1", "2", "4"}
    assert fig["pass_at_k"]["4"] >= fig["pass_at_k"]["1"]
    rollouts = run.root / "envs" / name / "calibration" / "trajectories.jsonl"
    assert len(rollouts.read_text().splitlines()) == 24
    calls = policy.calls
    again = run_synthesize(run, None, {"policy": policy}, syn=syn)
    assert again["capabilities"][name]["skipped"] and policy.calls == calls


def test_out_of_range_ends_in_needs_attention_with_figures(tmp_path):
    name = "multi_step_completion"
    run = make_library_run(tmp_path / "run", [name])
    folder = run.root / "envs" / name
    policy = OraclePolicy(lambda: folder, 1.0, target=load_domain("library"))  # solves everything: too easy
    syn = SynthesizeConfig(groups=3, samples=2, max_attempts=3, **{**SMALL, "validation_seeds": 3})
    report = run_synthesize(run, None, {"policy": policy}, syn=syn)
    status = read_json(folder / "status.json")
    assert report["capabilities"][name]["status"] == status["status"] == "needs_attention"
    assert status["figures"]["success_rate"] == 1.0 and status["attempts"] == 3
    cal = read_json(folder / "calibration.json")
    assert not cal["accepted"] and [a["direction"] for a in cal["attempts"]] == ["too_easy"] * 3
    assert [a["difficulty"] for a in cal["attempts"]] == [1, 2, 3]  # the difficulty knob moved each time
    assert load_capability_env(folder).status == "needs_attention"


def test_calibration_needs_a_policy_and_unknown_capabilities_are_refused(tmp_path):
    run = make_library_run(tmp_path / "run", ["tool_calling_precision"])
    with pytest.raises(UserError, match="policy"):
        run_synthesize(run, None, {}, syn=SynthesizeConfig())
    with pytest.raises(UserError, match="not a selected capability"):
        run_synthesize(run, None, {}, syn=SynthesizeConfig(calibrate=False), only=["nope"])


def test_a_too_hard_decision_environment_moves_its_weights_then_its_hints(tmp_path):
    """Calibration's moves for decision environments: toward the decision the base gets right more often while
    there is one, then a larger hinted share of each group; every move is recorded in the spec."""
    name = "structured_data_reasoning"  # copy_selection evidence: choose_lendable_copy only
    run = make_library_run(tmp_path / "run", [name])
    folder = run.root / "envs" / name
    policy = OraclePolicy(lambda: folder, 0.0, target=load_domain("library"))  # never right: too hard
    syn = SynthesizeConfig(groups=3, samples=2, max_attempts=3, **{**SMALL, "validation_seeds": 3})
    run_synthesize(run, None, {"policy": policy}, syn=syn)
    spec = read_json(folder / "spec.json")
    cal = read_json(folder / "calibration.json")
    assert spec["generator"]["kind"] == "library_decisions" and set(spec["generator"]["params"]["decisions"]) == {
        "choose_lendable_copy"
    }
    assert [a["direction"] for a in cal["attempts"]] == ["too_hard"] * 3
    assert spec["hint"]["fraction"] == 0.5  # one decision, none easier: the hints moved first
    assert [a["difficulty"] for a in cal["attempts"]] == [1, 1, 0]  # then the knob


def test_stop_without_success_ends_calibration_at_the_first_attempt_nothing_solved(tmp_path):
    """With `stop_without_success`, a base that never succeeds (hinted or not) is not calibrated again: the moves
    would have nothing to move toward, and GRPO no positive group."""
    name = "structured_data_reasoning"
    run = make_library_run(tmp_path / "run", [name])
    folder = run.root / "envs" / name
    policy = OraclePolicy(lambda: folder, 0.0, target=load_domain("library"))
    syn = SynthesizeConfig(groups=3, samples=2, max_attempts=3, stop_without_success=True, **SMALL)
    run_synthesize(run, None, {"policy": policy}, syn=syn)
    status = read_json(folder / "status.json")
    assert status["status"] == "needs_attention" and status["attempts"] == 1
    assert "no calibration sample succeeded at attempt 1" in status["reason"]
    assert len(read_json(folder / "calibration.json")["attempts"]) == 1


def test_a_split_decision_environment_hints_instead_of_re_weighting():
    """Success inside the window with too many all-zero groups (some decisions always missed, others always made):
    re-weighting would only trade all-zero groups for all-success ones, so the hints move first."""
    from trace_rl.synthesize.build import split_outcomes

    window = (0.2, 0.6)
    assert split_outcomes("too_hard", 0.41, window)  # the library run's structured_data_reasoning, attempt 1
    assert not split_outcomes("too_hard", 0.1, window)  # too hard on the mean: re-weight toward easier decisions
    assert not split_outcomes("too_easy", 0.45, window) and not split_outcomes("uninformative", 0.4, window)
    assert not split_outcomes("too_hard", None, window)
