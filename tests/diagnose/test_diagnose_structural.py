"""The structural analyzer: each planted deficit is found (and only it), clean trajectories show nothing, and on a
rollout run the selected capabilities' evidence trajectories are exactly those with the deficit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from trace_rl.artifacts.capabilities import Label
from trace_rl.config.diagnose import DiagnoseConfig
from trace_rl.diagnose.calls import heuristic_is_write, write_oracle
from trace_rl.diagnose.causes import CAUSE_CAPABILITIES
from trace_rl.diagnose.items import DiagnosisItem
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.diagnose.structural import (
    CAPABILITIES,
    StructuralAnalyst,
    analyze,
    format_equal,
    in_context,
)
from trace_rl.types import Task, ToolCall, Trajectory

from .diagnose_helpers import (
    TASKS,
    WRITE_KINDS,
    cleans,
    planted,
    success_with_recovered_format_error,
    write_run,
)

IS_WRITE = write_oracle(WRITE_KINDS)


def _lacking(traj: Trajectory) -> set[str]:
    report = analyze(traj, TASKS[traj.task_id], IS_WRITE)
    return {cap for cap, label in report.labels().items() if label == Label.LACKING}


@pytest.mark.parametrize("tid", sorted(planted()))
def test_each_planted_deficit_is_found_and_nothing_else(tid: str):
    traj, capability, kind = planted()[tid]
    report = analyze(traj, TASKS[traj.task_id], IS_WRITE)
    assert _lacking(traj) == {capability}, report.notes()
    assert kind in {f.kind for f in report.findings}, report.notes()
    assert all(f.capability == capability for f in report.findings)


def test_clean_trajectories_show_no_deficit():
    for traj in cleans():
        report = analyze(traj, TASKS[traj.task_id], IS_WRITE)
        assert report.findings == [], (traj.id, report.notes())
        assert Label.LACKING not in report.labels().values()


def test_applicability_follows_the_task():
    by_task = {t.task_id: analyze(t, TASKS[t.task_id], IS_WRITE).labels() for t in cleans()}
    refuse = by_task["refuse"]  # reads only: nothing to complete or to pass arguments to
    assert refuse["precondition_verification"] == Label.PRESENT
    assert refuse["multi_step_task_completion"] == Label.NA
    assert refuse["tool_calling_precision"] == Label.NA
    assert refuse["structured_data_reasoning"] == Label.PRESENT  # a fact must be communicated
    assert by_task["multi"]["structured_data_reasoning"] == Label.PRESENT  # writes with arguments
    assert all(v == Label.PRESENT for k, v in by_task["renew"].items() if k not in CAUSE_CAPABILITIES)


def test_no_reference_means_na_throughout_with_a_warning():
    traj = cleans()[0]
    report = analyze(traj, Task(id="x"), IS_WRITE)
    assert not report.has_reference
    assert set(report.labels().values()) == {Label.NA}
    analyst = StructuralAnalyst(IS_WRITE)
    result = asyncio.run(analyst.label([DiagnosisItem(traj, None)], asyncio.run(analyst.discover([])).candidates))
    assert set(result.labels[traj.id].values()) == {Label.NA}
    assert "no gold actions" in result.warnings[0]


def test_unknown_tool_and_argument_errors_are_formatting():
    from trace_rl.types import Message

    task = TASKS["renew"]
    base = cleans()[0]
    bad = [
        Message(role="assistant", tool_calls=[ToolCall(id="u1", name="renew", arguments={"copy_id": "C11"})]),
        Message(role="tool", tool_call_id="u1", name="renew", content="Error: Tool 'renew' not found.", error=True),
        Message(role="assistant", tool_calls=[ToolCall(id="u2", name="renew_loan", arguments={"copy": "C11"})]),
        Message(
            role="tool",
            tool_call_id="u2",
            name="renew_loan",
            error=True,
            content="Error: renew_loan() got an unexpected keyword argument 'copy'",
        ),
    ]
    traj = base.model_copy(update={"messages": [*base.messages[:2], *bad, *base.messages[2:]]})
    report = analyze(traj, task, IS_WRITE)
    assert {f.kind for f in report.findings} == {"malformed_call"}
    assert len(report.findings) == 2


def test_value_helpers():
    assert format_equal("#W12", "w12") and format_equal(2.0, "2.00") and format_equal("M2", "m2")
    assert not format_equal("C11", "C12")
    assert in_context(4.75, '{"fines": "4.75"}') and in_context(12.5, "fines of 12.50")
    assert not in_context(2.0, '{"member_id": "M2", "fines": "2.75"}')  # no match inside ids or other numbers
    assert in_context(["C1", "C2"], "C1 and C2") and not in_context(["C1", "C3"], "C1 and C2")
    assert not in_context(True, "true")
    assert heuristic_is_write("cancel_reservation") and not heuristic_is_write("get_user_details")
    assert write_oracle({"get_thing": True})("get_thing")  # the domain's kinds win over the heuristic


def _desk_run(tmp_path: Path):
    trajectories = [*cleans(), success_with_recovered_format_error(), *(t for t, _, _ in planted().values())]
    return write_run(tmp_path / "runs" / "desk", trajectories)


def test_stage_selects_capabilities_whose_evidence_shows_the_deficit(tmp_path: Path):
    run = _desk_run(tmp_path)
    result = run_diagnose(run, DiagnoseConfig(), tasks=TASKS, write_kinds=WRITE_KINDS)
    data = result.file
    assert data.params.model_dump() == {"rho": 0.10, "delta": 0.20, "n_runs": 1, "k": 1}
    assert data.analyst == "structural" and data.splits == ["train"]
    assert data.n_trajectories["diagnosed"] == 24
    assert (data.n_trajectories["succeeded"], data.n_trajectories["failed"]) == (9, 15)
    by_cap: dict[str, set[str]] = {}
    for traj, cap, _ in planted().values():
        by_cap.setdefault(cap, set()).add(traj.id)
    selected = {c.name: c for c in data.selected}
    # formatting is rare among failures and also shows up in a success: Δ = 2/15 − 1/9 < δ, rejected
    # (the others: precondition 4/15, completion 3/13, precision 3/13, reasoning 3/15 of the applicable failures)
    assert set(selected) == set(CAPABILITIES) - {"tool_call_formatting", *CAUSE_CAPABILITIES}
    for name, cap in selected.items():
        assert set(cap.stats["example_failed_trajectory_ids"]) == by_cap[name], name
        assert cap.status == "pending"
        assert cap.stats["runs_passed"] == 1
        assert cap.stats["delta_mean"] >= 0.2 and cap.stats["cov_mean"] >= 0.1
    formatting = next(c for c in data.candidates if c.name == "tool_call_formatting")
    assert formatting.status == "rejected"
    assert formatting.stats["er_pos_mean"] == pytest.approx(1 / 9)
    assert set(formatting.stats["example_failed_trajectory_ids"]) == by_cap["tool_call_formatting"]
    deltas = [c.stats["delta_mean"] for c in data.selected]
    assert deltas == sorted(deltas, reverse=True)
    # the label file of the single deterministic run agrees with the planted deficits exactly
    import json

    labels = json.loads((run.root / "diagnose" / "labels" / "run_0.json").read_text())["labels"]
    found = {(t, c) for t, row in labels.items() for c, v in row.items() if v == "LACKING"}
    expected = {(t.id, cap) for t, cap, _ in planted().values()} | {("desk/train/lucky_format", "tool_call_formatting")}
    assert found == expected


# -- the real library domain ----------------------------------------------------------------------------------------
def _library():
    pytest.importorskip("trace_rl.envs.library")
    from trace_rl.config import EnvConfig
    from trace_rl.envs.registry import load_domain

    return load_domain("library", EnvConfig(name="library", options={"n_train": 25, "n_test": 5}))


def _replay(domain, task, calls, *, success: bool, tid: str, say: str = "") -> Trajectory:
    """Execute calls in a fresh library environment and record them as a trajectory."""
    from trace_rl.types import Message

    env = domain.make_env()
    env.reset(task)
    messages = [Message(role="user", content="Hello, I need help at the desk.")]
    for i, (name, args) in enumerate(calls):
        call = ToolCall(id=f"k{i}", name=name, arguments=args)
        messages.append(Message(role="assistant", tool_calls=[call]))
        messages.append(env.execute(call))
    info = " ".join((task.evaluation_criteria.communicate_info or []) if success else [])
    messages.append(Message(role="assistant", content=say or f"All done. {info}"))
    return Trajectory(
        id=f"library/train/{tid}",
        env="library",
        split="train",
        task_id=task.id,
        trial=0,
        seed=0,
        messages=messages,
        reward=float(success),
        success=success,
    )


def test_library_gold_replays_are_clean_and_planted_deficits_found(tmp_path: Path):
    domain = _library()
    tasks = domain.tasks("train")
    gold = {t.id: [(a.name, a.arguments) for a in t.evaluation_criteria.actions] for t in tasks}
    fam = {t.id: t.metadata.get("family") for t in tasks}
    trajectories = [_replay(domain, t, gold[t.id], success=True, tid=f"{t.id}/clean") for t in tasks]
    expected: dict[str, str] = {}
    for t in tasks:
        g = gold[t.id]
        writes = [
            i
            for i, (n, _) in enumerate(g)
            if n in ("check_out", "renew_loan", "pay_fine", "place_hold", "cancel_hold", "return_copy")
        ]
        info = " ".join(t.evaluation_criteria.communicate_info or [])
        if fam[t.id] == "multi_step":  # stop after the first write (saying every fact: only one deficit planted)
            tid = f"{t.id}/stop"
            trajectories.append(_replay(domain, t, g[: writes[0] + 1], success=False, tid=tid, say=f"Done! {info}"))
            expected[f"library/train/{tid}"] = "multi_step_task_completion"
        elif fam[t.id] == "precondition_refusal":  # make the forbidden change anyway
            member = next(a["member_id"] for n, a in g if n == "get_member_details")
            tid = f"{t.id}/forbidden"
            calls = [*g, ("pay_fine", {"member_id": member, "amount": 0.5})]
            trajectories.append(_replay(domain, t, calls, success=False, tid=tid, say=f"Sorry: {info}"))
            expected[f"library/train/{tid}"] = "precondition_verification"
        elif fam[t.id] == "authenticated_write" and g[writes[0]][0] in ("renew_loan", "check_out", "return_copy"):
            tid = f"{t.id}/noread"  # write without reading the account first
            calls = [c for c in g if c[0] != "get_member_details"]
            if len(calls) < len(g):
                trajectories.append(_replay(domain, t, calls, success=False, tid=tid, say=f"Done. {info}"))
                expected[f"library/train/{tid}"] = "precondition_verification"
    assert len(expected) >= 6
    analyst = StructuralAnalyst(write_oracle(_kinds(domain)))
    for traj in trajectories:
        task = next(t for t in tasks if t.id == traj.task_id)
        report = analyst.report(DiagnosisItem(traj, task))
        want = {expected[traj.id]} if traj.id in expected else set()
        got = {c for c, v in report.labels().items() if v == Label.LACKING}
        assert got == want, (traj.id, report.notes())

    # the whole stage on a library run: tasks and tool kinds are loaded from the manifest's environment
    run = write_run(
        tmp_path / "runs" / "lib", trajectories, env={"name": "library", "options": {"n_train": 25, "n_test": 5}}
    )
    data = run_diagnose(run, DiagnoseConfig()).file
    assert data.n_trajectories["with_reference"] == len(trajectories)
    for cap in data.selected:
        for tid in cap.stats["example_failed_trajectory_ids"]:
            assert expected[tid] == cap.name
    assert {c.name for c in data.selected} <= set(expected.values())
    assert "multi_step_task_completion" in {c.name for c in data.selected}


def _kinds(domain) -> dict[str, bool]:
    from trace_rl.diagnose.calls import domain_write_kinds

    kinds = domain_write_kinds(domain)
    assert kinds["check_out"] and not kinds["get_member_details"]
    return kinds
