"""The artifact readers: a file that is not what it should be is one line naming the file (and the line of a JSONL
store); a run written before `layout_version` existed is read as version 1, a newer layout refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.artifacts.builders import write_capabilities_file

from trace_rl.artifacts.adapters import read_done, read_eval, read_train_record
from trace_rl.artifacts.capabilities import capability_definitions, read_capabilities
from trace_rl.artifacts.environments import read_env_spec, read_env_status
from trace_rl.artifacts.layout import LAYOUT_VERSION
from trace_rl.artifacts.router import read_router
from trace_rl.artifacts.store import JsonlStore, RunDir, atomic_write_json
from trace_rl.artifacts.trajectories import read_rollout_plans, read_trajectories
from trace_rl.errors import UserError

# A manifest as trace-rl wrote it before `layout_version` (the run-directory layout itself is unchanged).
OLD_MANIFEST = {
    "name": "old",
    "created_at": 1764600000.0,
    "trace_rl_version": "0.1.0",
    "git_sha": "472b4bb",
    "git_dirty": False,
    "python": "3.11.9",
    "platform": "Linux",
    "packages": {"pydantic": "2.11.0"},
    "config": {"env": {"name": "library"}},
    "commands": ["trace-rl rollout --env library"],
    "stages": {"rollout": {"status": "done", "started_at": 1.0, "ended_at": 2.0, "config": {}, "summary": {}}},
}


def one_line(exc: pytest.ExceptionInfo[UserError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_jsonl_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a"}\n[1, 2]\n')
    with pytest.raises(UserError) as exc:
        JsonlStore(path).latest()
    assert one_line(exc) == f"{path}, line 2: a list, not a JSON object"


def test_jsonl_record_without_its_key(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a"}\n\n{"task_id": "b"}\n')
    with pytest.raises(UserError) as exc:
        JsonlStore(path).keys()
    assert one_line(exc) == f"{path}, line 3: record has no 'id'"


def test_jsonl_complete_line_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b", oops}\n{"id": "c"}\n')
    with pytest.raises(UserError) as exc:
        JsonlStore(path).records()
    assert one_line(exc) == f"{path}, line 2: not valid JSON"
    path.write_text('{"id": "a"}\n{"id": "b", "tru')  # a torn last line (a kill mid-append) is not an error
    assert list(JsonlStore(path).latest()) == ["a"]


def test_schema_invalid_trajectories_are_counted_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "x", "env": "e"}\n')
    assert read_trajectories(path) == ({}, 1)


def test_manifest_without_layout_version_is_version_1(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "old")
    run.root.mkdir()
    run.manifest_path.write_text(json.dumps(OLD_MANIFEST))
    manifest = run.manifest()
    assert manifest.layout_version == 1 and manifest.stages["rollout"].status == "done"
    run.ensure(command="trace-rl report --run old")  # a new command rewrites it with the version
    assert json.loads(run.manifest_path.read_text())["layout_version"] == LAYOUT_VERSION
    assert run.manifest().commands[-1] == "trace-rl report --run old"


def test_a_new_run_records_the_layout_version(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "new")
    run.ensure({}, command="trace-rl rollout")
    assert json.loads(run.manifest_path.read_text())["layout_version"] == LAYOUT_VERSION


def test_manifest_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "future")
    atomic_write_json(run.manifest_path, {**OLD_MANIFEST, "layout_version": LAYOUT_VERSION + 1, "new_field": 1})
    with pytest.raises(UserError) as exc:
        run.manifest()
    assert one_line(exc) == (
        f"{run.root} was written with run-directory layout {LAYOUT_VERSION + 1}; this trace-rl reads layouts up to "
        f"{LAYOUT_VERSION} (upgrade trace-rl)"
    )


def test_schema_invalid_manifest(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "bad")
    atomic_write_json(run.manifest_path, {**OLD_MANIFEST, "stages": {"rollout": {"status": "paused"}}})
    with pytest.raises(UserError) as exc:
        run.manifest()
    assert one_line(exc).startswith(f"{run.manifest_path} is not a valid run manifest: stages.rollout.status: ")
    atomic_write_json(run.manifest_path, [1])
    with pytest.raises(UserError, match="not a JSON object"):
        run.manifest()


def test_missing_run_and_require(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "nothing")
    with pytest.raises(UserError) as exc:
        run.manifest()
    assert one_line(exc) == f"{run.root} is not a trace-rl run (no manifest.json)"
    with pytest.raises(UserError) as exc:
        run.require("run rollout first")
    assert one_line(exc) == f"{run.root} is not a trace-rl run (no manifest.json): run rollout first"


def test_capabilities_one_reader(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    with pytest.raises(UserError) as exc:
        read_capabilities(run)
    assert one_line(exc) == f"no {run.capabilities}: run `trace-rl diagnose --run {run.root}` first"
    assert capability_definitions(run) == {}
    atomic_write_json(run.capabilities, {"selected": [{"name": "Not Snake", "definition": "x"}], "candidates": []})
    with pytest.raises(UserError) as exc:
        read_capabilities(run)
    assert one_line(exc).startswith(f"{run.capabilities} is not a valid capabilities file: ")
    write_capabilities_file(
        run,
        [{"name": "verify_first", "definition": "Check the record first."}],
        [{"name": "verify_first", "definition": "An older wording."}, {"name": "exact", "definition": "Use ids."}],
    )
    assert capability_definitions(run) == {"verify_first": "Check the record first.", "exact": "Use ids."}


def test_stage_files_name_themselves(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r")
    env, adapter = run.env("cap"), run.adapter("cap")
    with pytest.raises(UserError) as exc:
        read_env_spec(env)
    assert one_line(exc) == f"{env.folder} is not a capability environment (no spec.json)"
    assert read_env_status(env) is None and read_done(adapter) is None and read_eval(adapter.eval_after) is None
    atomic_write_json(env.status, {"status": "maybe"})
    atomic_write_json(adapter.done, {"capability": "cap", "steps": "many"})
    atomic_write_json(adapter.eval_after, {"episodes": 3})
    atomic_write_json(run.router, {"base_model": "m", "options": []})
    atomic_write_json(run.plans, {"library/train": {"env": "library"}})
    for read, path in [
        (lambda: read_env_status(env), env.status),
        (lambda: read_done(adapter), adapter.done),
        (lambda: read_eval(adapter.eval_after), adapter.eval_after),
        (lambda: read_router(run), run.router),
        (lambda: read_rollout_plans(run), run.plans),
    ]:
        with pytest.raises(UserError) as exc:
            read()
        assert one_line(exc).startswith(f"{path} is not a valid"), one_line(exc)


def test_adapter_records_of_an_old_run_are_read(tmp_path: Path) -> None:
    """train_config.json of older runs carries `sampler: hf` (today: transformers)."""
    adapter = RunDir(tmp_path / "r").adapter("cap")
    config = {"model": "tiny", "max_steps": 2, "num_generations": 2, "groups_per_step": 1, "sampler": "hf"}
    atomic_write_json(
        adapter.train_config,
        {
            "config": config,
            "capability": "cap",
            "model_path": "/m",
            "device": "cpu",
            "bf16": False,
            "world_size": 1,
            "batch": {"micro": 2, "accumulation": 1, "groups": 1},
            "dataset": {"rows": 2},
            "backend": "trl",
            "sampler": "hf",
            "hint_fraction": 0.25,
        },
    )
    atomic_write_json(
        adapter.done,
        {
            "capability": "cap",
            "finished_at": 1.0,
            "steps": 2,
            "resumed_from": None,
            "wall_s": 3.5,
            "eval_before": {"mean_reward": 0.1, "success_rate": 0.0, "episodes": 4},
            "eval_after": None,
        },
    )
    record = read_train_record(adapter)
    assert record is not None and record.sampler == "hf" and record.config["max_steps"] == 2
    done = read_done(adapter)
    assert (
        done is not None
        and done.steps == 2
        and done.eval_before == {"mean_reward": 0.1, "success_rate": 0.0, "episodes": 4}
    )
    assert isinstance(done.eval_before["episodes"], int)
