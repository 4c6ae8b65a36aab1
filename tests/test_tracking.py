"""Experiment tracking (`run.report_to`, trace_rl/tracking.py): a tiny GRPO run logged to a local trackio project and
read back with trackio's own storage; calibration and evaluation figures through the tracker; unknown or uninstalled
trackers refused in one line."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from tests.training.tiny_fixtures import tokenizer

from trace_rl.config import TraceConfig, load_config
from trace_rl.config.core import RunSection
from trace_rl.errors import UserError
from trace_rl.tracking import (
    NoTracker,
    TrackingSettings,
    check_available,
    make_tracker,
    trainer_arguments,
    use_trackio_dir,
)

__all__ = ["tokenizer"]  # the training tests' fixture (the tiny model's tokenizer)


@pytest.fixture
def trackio_dir(tmp_path, monkeypatch):
    """A fresh trackio folder; TRACKIO_DIR restored afterwards (use_trackio_dir sets it for child processes)."""
    pytest.importorskip("trackio")
    monkeypatch.setenv("TRACKIO_DIR", os.environ.get("TRACKIO_DIR", str(tmp_path / "unused")))
    return tmp_path / "trackio"


def _storage():
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage


@pytest.mark.filterwarnings("ignore")
def test_tiny_grpo_run_logs_its_curves_to_a_local_trackio_project(tiny_dir, tokenizer, tmp_path, trackio_dir):
    from tests.training.train_toy import ScriptedSampler, ToyEnv, alternating

    from trace_rl.artifacts.adapters import read_metrics
    from trace_rl.artifacts.store import RunDir
    from trace_rl.config.train import TrainConfig
    from trace_rl.train.stage import run_train
    from trace_rl.training.trl_backend import TRLBackend

    cfg = TrainConfig(
        model=str(tiny_dir),
        max_steps=2,
        num_generations=2,
        groups_per_step=2,
        micro_batch_size=2,
        learning_rate=1e-3,
        lora_r=4,
        lora_alpha=8,
        max_turn_tokens=12,
        max_episode_tokens=128,
        max_turns=2,
        bf16="false",
        save_steps=10,
        resample_attempts=0,
        eval=False,
        log_trajectories=False,
    )
    run = RunDir(tmp_path / "tiny-run")
    section = RunSection(report_to="trackio", tracking_dir=trackio_dir)
    settings = TrackingSettings.from_run(section, run.root)
    assert settings.project == "tiny-run"  # the run folder's name, findable
    sampler = ScriptedSampler(tokenizer, alternating(tokenizer))
    backend = TRLBackend(sampler_for=lambda trainer: sampler, tracking=settings)

    (result,) = run_train(run, cfg, envs={"toy": ToyEnv("toy")}, backend=backend)
    assert result.steps == 2

    storage = _storage()
    assert storage.get_project_db_path("tiny-run") == trackio_dir.resolve() / "tiny-run.db"
    assert storage.get_runs("tiny-run") == ["toy"]  # one tracker run per capability
    logs = [row for row in storage.get_logs("tiny-run", "toy") if "train/loss" in row]
    ours = read_metrics(run.adapter("toy").metrics)
    assert [row["train/global_step"] for row in logs] == [1, 2] == [r["step"] for r in ours]  # trace-rl's own
    assert all(isinstance(row["train/loss"], float) for row in logs)
    assert [row["train/num_tokens"] for row in logs] == [r["num_tokens"] for r in ours]  # the same values
    assert logs[0]["train/num_tokens"] < logs[1]["train/num_tokens"]  # cumulative: a real curve, read back
    config = storage.get_run_config("tiny-run", "toy")
    assert config["max_steps"] == 2 and config["project"] == "tiny-run" and config["run_name"] == "toy"


def test_trackio_tracker_logs_calibration_and_evaluation_tables(tmp_path, trackio_dir):
    from trace_rl.artifacts.evaluation import ArmDifference, ArmResult, Comparison, PassKRow
    from trace_rl.evaluate.compare import log_comparison
    from trace_rl.synthesize.calibrate import CalibrationResult, log_calibration

    settings = TrackingSettings("trackio", project="unit", run_name="synthesize", directory=trackio_dir)
    tracker = make_tracker(settings)
    figures = {"mean_reward": 0.25, "success_rate": 0.5, "pass_at_k": {"1": 0.5, "2": 0.75}, "terminations": {}}
    for attempt, mean in ((1, 0.25), (2, 0.5)):
        result = CalibrationResult({**figures, "mean_reward": mean}, {}, accepted=attempt == 2, direction=None)
        log_calibration(tracker, "lookup", attempt, result)
    tracker.finish()

    evaluation = make_tracker(settings.for_run("evaluate"))
    comparison = Comparison(
        env="toy",
        split="test",
        tasks=3,
        trials=2,
        arms=[
            ArmResult(name="base", pass_k=[PassKRow(k=1, value=0.5, low=0.2, high=0.8, tasks=3)], episodes=6),
            ArmResult(
                name="trace",
                pass_k=[PassKRow(k=1, value=0.75, tasks=3)],
                diff_to_base=[PassKRow(k=1, value=0.25, tasks=3)],
                episodes=6,
            ),
        ],
        trace_versus=[ArmDifference(arm="gepa", rows=[PassKRow(k=1, value=0.125, tasks=3)])],
    )
    log_comparison(evaluation, comparison)
    evaluation.finish()

    storage = _storage()
    assert sorted(storage.get_runs("unit")) == ["evaluate", "synthesize"]
    rows = storage.get_logs("unit", "synthesize")
    assert [r["calibration/lookup/mean_reward"] for r in rows] == [0.25, 0.5]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["calibration/lookup/accepted"] == 1.0 and rows[0]["calibration/lookup/pass_at_k/2"] == 0.75
    logged = {k: v for row in storage.get_logs("unit", "evaluate") for k, v in row.items()}
    assert logged["step"] == 0 and logged["evaluate/trace/pass^1"] == 0.75 and logged["evaluate/trace/diff^1"] == 0.25
    assert logged["evaluate/trace_minus_gepa/diff^1"] == 0.125
    table = logged["evaluate/comparison"]
    assert table["_type"] == "trackio.table"
    assert [(r["arm"], r["k"], r["pass_k"]) for r in table["_value"]] == [("base", 1, 0.5), ("trace", 1, 0.75)]


def test_trackio_dir_can_move_after_trackio_was_imported(tmp_path, trackio_dir):
    import trackio  # noqa: F401  (imported: its folder constants are fixed)

    for name in ("a", "b"):
        folder = use_trackio_dir(tmp_path / name)
        assert _storage().get_project_db_path("p").parent == folder == (tmp_path / name).resolve()
        assert os.environ["TRACKIO_DIR"] == str(folder)


def test_none_is_a_no_op_and_the_default():
    assert RunSection().report_to == "none"
    assert isinstance(make_tracker(TrackingSettings()), NoTracker)
    assert trainer_arguments(None) == {"report_to": "none"} == trainer_arguments(TrackingSettings())


@pytest.mark.parametrize("name", ["wandb", "mlflow", "tensorboard"])
def test_uninstalled_tracker_is_one_line_naming_the_package(name, tmp_path):
    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(UserError) as err:
        make_tracker(TrackingSettings(name, directory=tmp_path))
    assert str(err.value).count("\n") == 0 and f"pip install {name}" in str(err.value)
    with pytest.raises(UserError, match=f"pip install {name}"):
        trainer_arguments(TrackingSettings(name))


def test_unknown_report_to_is_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("run:\n  report_to: neptune\n")
    with pytest.raises(UserError) as err:
        load_config(path)
    assert str(err.value).count("\n") == 0 and "run.report_to" in str(err.value)
    with pytest.raises(UserError, match="unknown tracker 'neptune'"):
        check_available("neptune")


def test_train_command_refuses_an_uninstalled_tracker_before_any_work(tmp_path):
    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    from trace_rl.train.stage import run_train

    cfg = TraceConfig.model_validate({"run": {"report_to": "wandb"}})
    settings = TrackingSettings.from_run(cfg.run, tmp_path / "r")
    with pytest.raises(UserError, match="pip install wandb"):
        run_train(tmp_path / "r", cfg.train, env_spec="library:lookup_answer", tracking=settings)
    assert not Path(tmp_path / "r").exists()


def test_synthesize_logs_every_calibration_attempt(tmp_path, trackio_dir):
    from tests.synthesize.synth_helpers import OraclePolicy, make_library_run, read_json

    from trace_rl.config.synthesize import SynthesizeConfig
    from trace_rl.envs.registry import load_domain
    from trace_rl.synthesize.stage import run_synthesize

    name = "multi_step_completion"
    run = make_library_run(tmp_path / "syn-run", [name])
    folder = run.root / "envs" / name
    policy = OraclePolicy(lambda: folder, 1.0, target=load_domain("library"))  # too easy: every attempt fails
    small = {"validation_seeds": 3, "train_seeds": 24, "test_seeds": 6, "concurrency": 4, "leak_sample": 4}
    syn = SynthesizeConfig(groups=3, samples=2, max_attempts=2, **small)
    cfg = TraceConfig.model_validate({"run": {"report_to": "trackio", "tracking_dir": str(trackio_dir)}})
    run_synthesize(run, cfg, {"policy": policy}, syn=syn)

    attempts = read_json(folder / "calibration.json")["attempts"]
    rows = _storage().get_logs("syn-run", "synthesize")
    assert [r["step"] for r in rows] == [a["attempt"] for a in attempts] == [1, 2]
    for row, attempt in zip(rows, attempts, strict=True):
        assert row[f"calibration/{name}/success_rate"] == attempt["figures"]["success_rate"]
        assert row[f"calibration/{name}/mean_reward"] == attempt["figures"]["mean_reward"]
        assert row[f"calibration/{name}/accepted"] == float(attempt["accepted"])


def test_evaluate_logs_its_comparison(tmp_path, trackio_dir):
    from tests.evaluate.evaltoy import AdapterPolicy, FakeBackend, amount, make_run, trace_config

    from trace_rl.config import EvaluateConfig
    from trace_rl.evaluate.stage import run_evaluate

    run = make_run(tmp_path / "eval-run", {"cap_a": 24})
    cfg = trace_config(run)
    cfg.run = RunSection(report_to="trackio", tracking_dir=trackio_dir)
    ecfg = EvaluateConfig.model_validate({"arms": ["base"], "trials": 2, "concurrency": 2, "samples": 50})

    def outcome(task_id: str, trial: int, adapter: str | None, system: str) -> str:
        return "ok" if amount(task_id) == 3 or trial == 1 else "fail"

    comparison = run_evaluate(run, cfg, ecfg, clients={"policy": AdapterPolicy(outcome)}, backend=FakeBackend())
    logged = {k: v for row in _storage().get_logs("eval-run", "evaluate") for k, v in row.items()}
    base = comparison.arm("base")
    assert logged["evaluate/base/pass^1"] == base.at(1).value and logged["evaluate/base/pass^2"] == base.at(2).value
    table = logged["evaluate/comparison"]["_value"]
    assert [(r["arm"], r["k"], r["pass_k"]) for r in table] == [("base", p.k, p.value) for p in base.pass_k]
