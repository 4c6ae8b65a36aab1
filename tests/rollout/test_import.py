"""`trace-rl import`: τ² results.json (an unknown task key tolerated with a warning), τ-bench v1 lists, JSONL of
OpenAI messages; the task-set check; the run it writes (split `imported`, models kept, reference tasks, marker)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import import_summary, read_reference_tasks, read_trajectories
from trace_rl.cli.app import main
from trace_rl.envs.tau2.data import candidate_dirs
from trace_rl.errors import UserError
from trace_rl.rollout.imported import import_log
from trace_rl.rollout.importers import read_log

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real_runs"
GROK = REAL / "tau2_airline_grok-4-fast-reasoning.json.gz"
V1 = REAL / "taubench_v1_airline_gpt-4o.json.gz"
needs_real = pytest.mark.skipif(
    not GROK.exists() or not any(d.is_dir() for d in candidate_dirs()), reason=f"real runs ({REAL}) or τ² data absent"
)


def _grok_with_extra_key(tmp_path: Path) -> Path:
    data = json.loads(gzip.decompress(GROK.read_bytes()))
    for task in data["tasks"]:
        task["evaluation_criteria"]["acceptable_outcomes"] = None
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


@needs_real
def test_tau2_file_with_an_unknown_task_key_imports_with_a_warning(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    result = import_log(_grok_with_extra_key(tmp_path), run)
    assert any("acceptable_outcomes" in w and "50 task(s)" in w for w in result.warnings)
    assert result.task_set == "v0.2"  # the set whose gold the file's tasks match
    trajs, bad = read_trajectories(run.trajectories)
    assert bad == 0 and len(trajs) == 66
    t = next(iter(trajs.values()))
    assert t.split == "imported" and t.id.startswith("tau2:airline/imported/")
    assert t.model == "xai/grok-4-fast-reasoning" and t.user_model == "xai/grok-4-fast-reasoning"
    ref = read_reference_tasks(run)
    assert ref is not None and ref.task_set == "v0.2" and len(ref.tasks) == 50
    summary = import_summary(run.manifest())
    assert summary["format"] == "tau2" and summary["n_episodes"] == 66 and summary["succeeded"] == 37
    assert run.manifest().config["diagnose"] == {"splits": ["imported"]}


@needs_real
def test_task_set_mismatch_is_an_error_naming_the_tasks(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"task set head: 12 differ in gold actions or facts \(2, 7, 9, 14"):
        import_log(GROK, RunDir(tmp_path / "run"), task_set="head")
    assert not (tmp_path / "run").exists()
    result = import_log(GROK, RunDir(tmp_path / "run2"), task_set="head", allow_mismatch=True)
    assert any("imported anyway" in w for w in result.warnings)


@needs_real
def test_taubench_v1_import_keeps_its_own_tasks_and_the_model(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    result = import_log(V1, run, model="gpt-4o")
    assert result.log.env == "tau2:airline" and len(result.log.trajectories) == 200
    ref = read_reference_tasks(run)
    assert ref is not None and len(ref.tasks) == 50
    matched = [t for t in ref.tasks if "tau2_task_id" in t.metadata]
    assert len(matched) == 36 and any("14 of 50 v1 tasks match no τ² task" in w for w in result.warnings)
    trajs, _ = read_trajectories(run.trajectories)
    assert {t.model for t in trajs.values()} == {"gpt-4o"}
    assert sum(bool(t.success) for t in trajs.values()) == 84


def test_jsonl_of_openai_messages(tmp_path: Path) -> None:
    line = {
        "task_id": "t1",
        "reward": 0.0,
        "model": "my-agent",
        "messages": [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_x", "arguments": '{"a": 1}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Error: no such x"},
            {"role": "assistant", "content": "Sorry."},
        ],
    }
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps({**line, "reward": 1.0}) + "\n")
    log = read_log(path, env="library")
    assert log.format == "jsonl" and [t.trial for t in log.trajectories] == [0, 1]  # a repeated pair: next trial
    t = log.trajectories[0]
    assert t.id == "library/imported/t1/0" and t.model == "my-agent" and t.success is False
    call = t.messages[2].tool_calls[0]
    assert call.arguments == {"a": 1} and t.messages[3].error and t.messages[3].name == "get_x"
    with pytest.raises(UserError, match="does not name its environment"):
        read_log(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "t1", "messages": []}) + "\n")
    with pytest.raises(UserError, match=r"line 1: missing reward"):
        read_log(bad, env="library")


def test_cli_refuses_an_unknown_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"hello": 1}))
    assert main(["import", str(path), "--run", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "cannot tell the log format" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
