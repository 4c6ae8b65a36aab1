"""`trace-rl export dataset`: a run's trajectories and evaluation results as Hugging Face datasets (save_to_disk and
parquet), read back with `datasets`' own loaders into exactly the records the run holds; bad input is one line."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("datasets")
import datasets
from tests.evaluate.evaltoy import AdapterPolicy, FakeBackend, amount, make_run, trace_config
from tests.rollout.toy import ToyPolicy, register_toy

from trace_rl.artifacts.evaluation import Comparison
from trace_rl.artifacts.store import RunDir
from trace_rl.artifacts.trajectories import read_trajectories
from trace_rl.cli.app import main
from trace_rl.config import EvaluateConfig, TraceConfig
from trace_rl.errors import UserError
from trace_rl.evaluate.stage import run_evaluate
from trace_rl.interop.datasets_io import (
    export_run_datasets,
    load_evaluation,
    load_trajectories,
)
from trace_rl.rollout.stage import rollout
from trace_rl.types import Trajectory


def _outcome(task_id: str, trial: int) -> str:
    return "ok" if (int(task_id.rsplit("-", 1)[1]) + trial) % 3 else "fail"


@pytest.fixture
def rolled_out(tmp_path) -> RunDir:
    """A run directory written by a real (tiny, toy) rollout: successes and failures, two trials per task."""
    register_toy(4)
    run = RunDir(tmp_path / "runs" / "r")
    cfg = TraceConfig.model_validate({"env": {"name": "toy"}, "rollout": {"policy": "toy", "trials": 2}})
    result = rollout(cfg, run, progress="none", clients={"toy": ToyPolicy(_outcome)})
    assert result.complete
    return run


def _by_id(trajectories: list[Trajectory]) -> dict[str, Trajectory]:
    return {t.id: t for t in trajectories}


def test_rollout_trajectories_round_trip_in_both_formats(rolled_out, tmp_path):
    originals, _ = read_trajectories(rolled_out.trajectories)
    assert len(originals) == 8 and {t.success for t in originals.values()} == {True, False}
    out = tmp_path / "export"
    lines = export_run_datasets(rolled_out.root, out, fmt="both")
    assert lines[0] == f"trajectories: 8 rows -> {out / 'trajectories'}"
    assert "rollout/trajectories.jsonl" in lines[-1]

    from_disk = datasets.load_from_disk(str(out / "trajectories"))
    from_parquet = datasets.Dataset.from_parquet(str(out / "trajectories.parquet"), cache_dir=str(tmp_path / "c"))
    for ds in (from_disk, from_parquet):
        assert len(ds) == 8 and set(ds["stage"]) == {"rollout"} and set(ds["source"]) == {"rollout/trajectories.jsonl"}
        assert ds.features["reward"].dtype == "float64" and ds.features["messages"].dtype == "string"
    for path in (out / "trajectories", out / "trajectories.parquet", out):
        loaded = load_trajectories(path)
        assert _by_id(loaded) == originals  # field for field, messages and tool calls included
    first = originals[from_disk[0]["id"]]
    assert from_disk[0]["reward"] == first.reward and from_disk[0]["success"] == first.success
    assert any(m.tool_calls for m in first.messages)


def test_formats_overwrite_and_bad_input(rolled_out, tmp_path):
    parquet_only = tmp_path / "p"
    export_run_datasets(rolled_out.root, parquet_only, fmt="parquet")
    assert sorted(p.name for p in parquet_only.iterdir()) == ["trajectories.parquet"]
    disk_only = tmp_path / "d"
    export_run_datasets(rolled_out.root, disk_only, fmt="disk")
    assert sorted(p.name for p in disk_only.iterdir()) == ["trajectories"]
    with pytest.raises(UserError, match="not empty"):
        export_run_datasets(rolled_out.root, disk_only, fmt="disk")
    export_run_datasets(rolled_out.root, disk_only, fmt="parquet", overwrite=True)
    assert sorted(p.name for p in disk_only.iterdir()) == ["trajectories.parquet"]  # replaced, not mixed
    with pytest.raises(UserError, match="expected one of disk, parquet, both"):
        export_run_datasets(rolled_out.root, tmp_path / "x", fmt="csv")
    with pytest.raises(UserError, match="inside the run directory"):
        export_run_datasets(rolled_out.root, rolled_out.root / "export")
    empty = tmp_path / "empty-run"
    (empty / "rollout").mkdir(parents=True)
    (empty / "rollout" / "trajectories.jsonl").write_text('{"id": "not a trajectory"}\n')
    with pytest.raises(UserError, match="no trajectories or evaluation results"):
        export_run_datasets(empty, tmp_path / "y")
    assert not (tmp_path / "y").exists() and not (tmp_path / "x").exists()


def test_evaluation_results_and_episodes_round_trip(tmp_path):
    run = make_run(tmp_path / "run", {"cap_a": 24})
    ecfg = EvaluateConfig.model_validate({"arms": ["base"], "trials": 2, "concurrency": 2, "samples": 50})

    def outcome(task_id: str, trial: int, adapter: str | None, system: str) -> str:
        return "ok" if amount(task_id) == 3 or trial == 1 else "fail"

    comparison = run_evaluate(
        run, trace_config(run), ecfg, clients={"policy": AdapterPolicy(outcome)}, backend=FakeBackend()
    )
    out = tmp_path / "export"
    lines = export_run_datasets(run.root, out)
    assert any(line.startswith("evaluation: 1 rows") for line in lines)

    stored = Comparison.load(run.comparison)
    assert stored.arms == comparison.arms
    for path in (out / "evaluation", out / "evaluation.parquet"):
        assert load_evaluation(path) == stored.arms
    ds = datasets.load_from_disk(str(out / "evaluation"))
    assert ds[0]["name"] == "base" and ds[0]["env"] == stored.env and ds[0]["trials"] == 2
    assert [r["k"] for r in ds[0]["pass_k"]] == [1, 2]

    episodes = datasets.load_from_disk(str(out / "trajectories"))
    arm_file = "evaluate/arms/base.jsonl"
    assert arm_file in set(episodes["source"]) and "evaluate" in set(episodes["stage"])
    expected, _ = read_trajectories(run.root / arm_file)
    loaded = [t for t, s in zip(load_trajectories(out), episodes["source"], strict=True) if s == arm_file]
    assert _by_id(loaded) == expected and len(expected) > 0


def test_bad_run_dir_exits_2_through_the_cli(tmp_path, capsys):
    code = main(["export", "dataset", "--run", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1
    bare = tmp_path / "bare"
    bare.mkdir()
    assert main(["export", "dataset", "--run", str(bare), "--out", str(tmp_path / "o")]) == 2
    assert "no trajectories or evaluation results" in capsys.readouterr().err
    assert not Path(tmp_path / "o").exists()


def test_export_command_prints_the_written_datasets(rolled_out, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["export", "dataset", "--run", str(rolled_out.root), "--out", str(out), "--format", "parquet"]) == 0
    printed = capsys.readouterr().out
    assert f"trajectories: 8 rows -> {out / 'trajectories.parquet'}" in printed
    assert len(load_trajectories(out / "trajectories.parquet")) == 8
