"""Stage plumbing: the leak guard, exclusions, loading tasks through the registry, config defaults, the report
renderers and the `diagnose` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from trace_rl.artifacts.capabilities import read_capabilities
from trace_rl.artifacts.store import RunDir
from trace_rl.cli.diagnose import diagnose_command
from trace_rl.config import config_from_record, load_config
from trace_rl.config.diagnose import DiagnoseConfig, is_test_split
from trace_rl.diagnose.stage import run_diagnose
from trace_rl.diagnose.summaries import pack, summarize, truncate
from trace_rl.errors import UserError
from trace_rl.report.capabilities import capabilities_dict, capabilities_table, render, run_capabilities_dict

from .diagnose_helpers import TASKS, WRITE_KINDS, clean, cleans, planted, register_desk, write_run


def _mixed(tmp_path: Path) -> RunDir:
    test_side = [clean(f"t{i}", "renew", split="test") for i in range(3)]
    infra = clean("infra", "multi").model_copy(update={"infra_error": "server down", "success": None})
    unscored = clean("unscored", "multi").model_copy(update={"success": None, "reward": None})
    return write_run(
        tmp_path / "runs" / "mixed", [*cleans(), *(t for t, _, _ in planted().values()), *test_side, infra, unscored]
    )


def test_leak_guard_and_exclusions_are_recorded(tmp_path: Path):
    run = _mixed(tmp_path)
    data = run_diagnose(run, DiagnoseConfig(), tasks=TASKS, write_kinds=WRITE_KINDS).file
    assert data.splits == ["train"]
    assert data.n_trajectories["excluded"] == {
        "infra_error": 1,
        "unscored": 1,
        "other_splits": {"test": 3},
        "invalid_record": 0,
    }
    assert data.n_trajectories["diagnosed"] == 8 + 15
    every = {t for c in data.candidates for t in c.stats["example_failed_trajectory_ids"]}
    assert not any("/test/" in t for t in every)
    with pytest.raises(UserError, match="refusing to diagnose test split"):
        run_diagnose(run, DiagnoseConfig(splits=["test"]), tasks=TASKS, write_kinds=WRITE_KINDS)
    allowed = run_diagnose(
        run, DiagnoseConfig(splits=["test"], allow_test_split=True), tasks=TASKS, write_kinds=WRITE_KINDS
    ).file
    assert allowed.splits == ["test"] and allowed.n_trajectories["diagnosed"] == 3
    assert is_test_split("test") and is_test_split("test_hard") and not is_test_split("train")


def test_test_tasks_inside_a_mixed_split_are_left_out(tmp_path: Path):
    register_desk()
    base = [t.model_copy(update={"split": "base", "id": t.id.replace("/train/", "/base/")}) for t in cleans()]
    exam = clean("exam", "renew").model_copy(update={"split": "base", "task_id": "exam", "success": False})
    run = write_run(tmp_path / "runs" / "base", [*base, exam])
    data = run_diagnose(run, DiagnoseConfig(splits=["base"])).file
    assert data.n_trajectories["excluded"]["test_tasks"] == 1
    assert data.n_trajectories["diagnosed"] == 8 and data.n_trajectories["failed"] == 0
    assert any("test tasks" in w for w in data.warnings)
    allowed = run_diagnose(run, DiagnoseConfig(splits=["base"], allow_test_split=True)).file
    assert allowed.n_trajectories["diagnosed"] == 9


def test_last_record_of_an_id_wins(tmp_path: Path):
    good = clean("retried", "renew")
    failed_first = good.model_copy(update={"infra_error": "timeout", "success": None})
    run = write_run(tmp_path / "runs" / "retry", [failed_first, *cleans()])
    run.jsonl("rollout/trajectories.jsonl").append([good])
    with (run.root / "rollout" / "trajectories.jsonl").open("a") as fh:
        fh.write('{"id": "broken", "env": "desk"}\n')  # a record that does not parse
    data = run_diagnose(run, DiagnoseConfig(), tasks=TASKS, write_kinds=WRITE_KINDS).file
    assert data.n_trajectories["diagnosed"] == 9
    assert data.n_trajectories["excluded"]["infra_error"] == 0
    assert data.n_trajectories["excluded"]["invalid_record"] == 1
    assert any("no failed trajectories: Cov = 0" in w for w in data.warnings)
    assert data.selected == []


def test_user_errors_are_one_clear_line(tmp_path: Path):
    empty = RunDir(tmp_path / "runs" / "empty")
    empty.ensure(config={"env": {"name": "desk"}})
    with pytest.raises(UserError, match="no rollouts in"):
        run_diagnose(empty, DiagnoseConfig())
    only_test = write_run(tmp_path / "runs" / "t", [clean("x", "renew", split="test")])
    with pytest.raises(UserError, match=r"no scored trajectories in split\(s\) \['train'\]"):
        run_diagnose(only_test, DiagnoseConfig(), tasks=TASKS)
    elsewhere = [t.model_copy(update={"env": "nowhere"}) for t in cleans()]
    unknown_env = write_run(tmp_path / "runs" / "u", elsewhere, env={"name": "nowhere"})
    with pytest.raises(UserError, match="needs a model client"):
        run_diagnose(unknown_env, DiagnoseConfig(analyst="somebody"))
    with pytest.raises(UserError, match=r"no .*capabilities\.json"):
        read_capabilities(unknown_env)
    # no gold actions anywhere: the structural analyzer gives way to the behavioral one, and says so
    fallback = run_diagnose(unknown_env, DiagnoseConfig()).file
    assert fallback.analyst == "behavioral" and any("behavioral analyzer" in w for w in fallback.warnings)
    discovery = json.loads(unknown_env.discovery.read_text())  # the files name the analyzer that ran, too
    assert discovery["analyst"] == "behavioral"
    assert {json.loads(p.read_text())["analyst"] for p in unknown_env.root.glob("diagnose/labels/*.json")} == {
        "behavioral"
    }


def test_tasks_and_tool_kinds_come_from_the_registered_domain(tmp_path: Path):
    register_desk()  # no environment: tool kinds fall back to the name heuristic, which fits the desk's tools
    run = write_run(tmp_path / "runs" / "reg", [*cleans(), *(t for t, _, _ in planted().values())])
    data = run_diagnose(run, DiagnoseConfig()).file
    assert data.n_trajectories["with_reference"] == 23
    injected = run_diagnose(run, DiagnoseConfig(), tasks=TASKS, write_kinds=WRITE_KINDS, fresh=True).file
    assert [c.model_dump() for c in data.candidates] == [c.model_dump() for c in injected.candidates]
    assert {c.name for c in data.selected} == {
        "precondition_verification",
        "multi_step_task_completion",
        "tool_calling_precision",
        "structured_data_reasoning",
    }


def test_config_defaults_follow_the_paper_and_the_analyst():
    assert (DiagnoseConfig().runs, DiagnoseConfig().min_passes) == (1, 1)
    llm = DiagnoseConfig(analyst="openai:gpt")
    assert (llm.runs, llm.min_passes, llm.rho, llm.delta, llm.max_candidates) == (10, 8, 0.10, 0.20, 10)
    assert DiagnoseConfig(analyst="x", n_runs=5).min_passes == 4
    assert DiagnoseConfig(n_runs=3, k=3).min_passes == 3
    with pytest.raises(ValueError, match="cannot exceed"):
        DiagnoseConfig(n_runs=3, k=4)
    with pytest.raises(ValueError, match=r"cannot exceed the number of labeling runs \(1\)"):
        DiagnoseConfig(k=2)  # structural default N = 1
    with pytest.raises(UserError, match=r"diagnose.*k \(2\) cannot exceed the number of labeling runs \(1\)"):
        load_config(None, {"diagnose.k": 2})  # refused at load, before rollout runs
    cfg = config_from_record({"diagnose": {"rho": 0.2}}, {"diagnose.rho": None, "diagnose.delta": 0.3})
    assert (cfg.diagnose.rho, cfg.diagnose.delta) == (0.2, 0.3)
    with pytest.raises(UserError, match=r"diagnose\.rhoo"):
        config_from_record({"diagnose": {"rhoo": 0.2}})


def test_report_dict_and_table(tmp_path: Path):
    run = write_run(tmp_path / "runs" / "rep", [*cleans(), *(t for t, _, _ in planted().values())])
    run_diagnose(run, DiagnoseConfig(), tasks=TASKS, write_kinds=WRITE_KINDS)
    view = run_capabilities_dict(run)
    assert view == capabilities_dict(read_capabilities(run))
    json.dumps(view)  # plain data, ready for the HTML report
    assert [r["name"] for r in view["rows"] if r["selected"]] == view["selected"]
    row = view["rows"][0]
    assert set(row) >= {"delta_mean", "cov_mean", "runs_passed", "n_runs", "example_trajectory_ids", "definition"}
    assert row["example_trajectory_ids"] and all(t.startswith("desk/train/") for t in row["example_trajectory_ids"])
    console = Console(record=True, width=200)
    console.print(capabilities_table(read_capabilities(run)))
    text = console.export_text()
    assert "runs passed" in text and "1/1" in text and view["selected"][0] in text
    render(read_capabilities(run), Console(record=True, width=200))


def test_diagnose_command(tmp_path: Path):
    register_desk()
    run = write_run(tmp_path / "runs" / "cmd", [*cleans(), *(t for t, _, _ in planted().values())])
    app = typer.Typer()
    app.command("diagnose")(diagnose_command)
    app.command("noop")(lambda: None)  # two commands: typer keeps `diagnose` as a sub-command
    result = CliRunner().invoke(app, ["diagnose", "--run", str(run.root), "--rho", "0.15", "--split", "train"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "selected" in result.output
    data = read_capabilities(run)
    assert data.params.rho == 0.15
    commands = json.loads(run.manifest_path.read_text())["commands"]
    assert commands[-1] == f"trace-rl diagnose --run {run.root} --rho 0.15 --split train"
    bad = CliRunner().invoke(app, ["diagnose", "--run", str(tmp_path / "nope")])
    assert isinstance(bad.exception, UserError)


def test_summaries_fit_their_budget():
    assert truncate("x" * 100, 40).startswith("x") and "chars cut" in truncate("x" * 100, 40)
    assert len(truncate("x" * 1000, 100)) <= 100
    traj, _, _ = planted()["wrong_value_1"]
    from trace_rl.diagnose.items import DiagnosisItem

    long = traj.model_copy(deep=True)
    for m in long.messages:
        if m.role == "tool":
            m.content = (m.content or "") + " filler" * 400
    text = summarize(DiagnosisItem(long, None, ["a planted note"]), ref="T1", max_content_chars=120, max_chars=900)
    assert len(text) <= 1000
    assert text.startswith("### T1 trajectory desk/train/wrong_value_1 (task multi) — FAILED")
    assert "agent -> pay_fine" in text and "reference check: a planted note" in text
    many = traj.model_copy(update={"messages": traj.messages * 30})
    short = summarize(DiagnosisItem(many, None), max_chars=1500)
    assert "events omitted" in short and len(short) <= 1600
    assert "user: Hi, I want to pay 2.00" in short  # the request (first events) is kept
    assert pack(["a" * 10] * 5, max_items=2, max_chars=1000) == [[0, 1], [2, 3], [4]]
    assert pack(["a" * 600, "b" * 600, "c" * 10], max_items=10, max_chars=1000) == [[0], [1, 2]]
