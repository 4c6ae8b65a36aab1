"""Budget counting from training logs (and the nominal fallback), matched steps, and the two commands' flags."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from trace_rl.artifacts.trajectories import training_rollouts_by_step
from trace_rl.config.train import steps_at_fractions
from trace_rl.evaluate.budget import adapter_budget, matched_steps

from .evaltoy import make_run, write_adapter


def test_training_rollouts_are_counted_from_the_log(tmp_path: Path) -> None:
    write_adapter(tmp_path / "a", tmp_path / "w", "cap", steps=3, k=4, g=2, logged=20)
    with (tmp_path / "w" / "trajectories.jsonl").open("a") as fh:  # a resumed step re-logged: counted once
        fh.write(json.dumps({"id": "cap/train/step0/call0/g0/0"}) + "\n" + '{"id": "cap/train/st')
    assert training_rollouts_by_step(tmp_path / "w" / "trajectories.jsonl") == {0: 8, 1: 8, 2: 4}
    b = adapter_budget("cap", tmp_path / "a", tmp_path / "w")
    assert (b.rollouts, b.source, b.nominal, b.steps) == (20, "trajectories", 24, 3)
    assert b.until(1) == 8 and b.until(2) == 16
    (tmp_path / "w" / "trajectories.jsonl").unlink()
    nominal = adapter_budget("cap", tmp_path / "a", tmp_path / "w")
    assert (nominal.rollouts, nominal.source, nominal.until(2)) == (24, "nominal", 16)
    assert adapter_budget("x", tmp_path / "none", tmp_path / "none").source == "unknown"


def test_matched_steps_and_steps_at_fractions() -> None:
    assert matched_steps(54, 4, 2) == 7 and matched_steps(1, 16, 4) == 1 and matched_steps(5120, 16, 4) == 80
    assert steps_at_fractions(40, [0.25, 0.5, 0.75]) == [10, 20, 30] and steps_at_fractions(2, [0.25, 0.5]) == [1]


def test_commands_map_flags_to_configs(tmp_path: Path, monkeypatch) -> None:
    from trace_rl.artifacts.evaluation import Comparison
    from trace_rl.cli.evaluate import evaluate_command
    from trace_rl.cli.route import route_command
    from trace_rl.evaluate import stage as eval_stage
    from trace_rl.route import stage as route_stage

    run = make_run(tmp_path / "run", {"cap_a": 8})
    seen = {}

    def fake_evaluate(run_dir, cfg, ecfg, **kw):
        seen["ecfg"] = ecfg
        return Comparison(env="evaltoy", split="test", tasks=1, trials=1, arms=[], details={"skipped": {}})

    monkeypatch.setattr(eval_stage, "run_evaluate", fake_evaluate)
    app = typer.Typer()
    app.command("evaluate")(evaluate_command)
    app.command("route")(route_command)
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--run",
            str(run.root),
            "--trials",
            "4",
            "--arms",
            "trace,gepa",
            "--gepa-budget",
            "33",
            "--no-curve",
            "--no-train",
            "--out",
            "range1",
        ],
    )
    assert result.exit_code == 0, result.output
    e = seen["ecfg"]
    assert (e.trials, e.arms, e.gepa.budget, e.curve.enabled, e.train_baselines, e.out) == (
        4,
        ["base", "trace", "gepa"],
        33,
        False,
        False,
        "range1",
    )
    bad = runner.invoke(app, ["evaluate", "--run", str(tmp_path / "nope")])
    assert bad.exit_code != 0

    def fake_route(run_dir, cfg, rcfg, **kw):
        seen["rcfg"] = rcfg
        from trace_rl.artifacts.evaluation import Estimate, RoutingAccuracy

        return RoutingAccuracy(
            truth="t",
            labels=["cap_a", "base"],
            confusion=[[1, 1], [0, 0]],
            accuracy=Estimate(value=0.5, low=0.0, high=1.0),
            n_tasks=2,
            base_rate=0.5,
        )

    monkeypatch.setattr(route_stage, "run_route", fake_route)
    result = runner.invoke(
        app, ["route", "--run", str(run.root), "--tasks", "7", "--oracle-trials", "2", "--include-system"]
    )
    assert result.exit_code == 0, result.output
    r = seen["rcfg"]
    assert (r.tasks_per_env, r.oracle_trials, r.prompt.include_system) == (7, 2, True)
    assert "routing accuracy 50.0% [0.0%, 100.0%] on 2 held-out tasks · base label won 50.0%" in result.output
