"""User errors from the command line are one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from trace_rl.cli.app import main
from trace_rl.config import load_config
from trace_rl.errors import UserError
from trace_rl.models.specs import model_from_spec
from trace_rl.stage import command_line


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trace_rl.cli", *args], capture_output=True, text=True, timeout=120)


def test_unknown_stage_is_one_line():
    out = run_cli("bogus")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: No such command 'bogus'."
    assert "Traceback" not in out.stderr


def test_demo_without_its_config_says_so(capsys, tmp_path):
    assert main(["demo", "--config", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"error: demo config not found: {tmp_path / 'none.yaml'} " + (
        "(run from the repository root or pass --config)"
    )


def test_run_checks_the_config_before_any_compute(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"run: {{name: x, runs_dir: {tmp_path}}}\ntrain: {{stepz: 3}}\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {cfg}: train.stepz: Extra inputs are not permitted"
    assert not (tmp_path / "x").exists()
    cfg.write_text("train: {max_steps: 0}\nevaluate: {trials: many}\n")  # every problem, one line each
    with pytest.raises(UserError) as caught:
        load_config(cfg)
    assert str(caught.value).splitlines() == [
        f"{cfg}: train.max_steps: Input should be greater than or equal to 1",
        f"{cfg}: evaluate.trials: Input should be a valid integer, unable to parse string as an integer",
    ]


def test_a_config_with_the_old_stages_mapping_is_refused_in_one_line(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"run: {{name: x, runs_dir: {tmp_path}}}\nstages:\n  train: {{max_steps: 3}}\n  route: {{}}\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {cfg}: `stages:` is gone; move each stage's settings to a top-level section "
        "(`stages: {train: ...}` becomes `train: ...`; here: route, train)"
    )
    assert not (tmp_path / "x").exists()


def test_an_old_run_recorded_stages_and_is_still_read(tmp_path):
    from trace_rl.artifacts.store import RunDir
    from trace_rl.stage import load_run_config

    run = RunDir(tmp_path / "old")
    recorded = {
        "env": {"name": "library"},
        "stages": {
            "diagnose": {"rho": 0.3},
            "train": {"sampler": "transformers", "max_steps": 2},
            "evaluate": {"arms": ["base"]},
        },
    }
    run.ensure(config=recorded, command="trace-rl rollout --env library")
    cfg = load_run_config(run, None, {"evaluate.trials": 5})
    assert (cfg.diagnose.rho, cfg.train.max_steps, cfg.evaluate.arms, cfg.evaluate.trials) == (0.3, 2, ["base"], 5)
    with pytest.raises(UserError, match=r"manifest\.json \(recorded config\): train\.max_steps"):
        load_run_config(run, None, {"train.max_steps": 0})


def test_the_manifest_under_trace_rl_run_records_that_command_once(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"run: {{name: x, runs_dir: {tmp_path}}}\n"
        "models: {policy: {kind: tiny, model: tiny, max_tokens: 8, device: cpu}}\n"
        "env: {name: library, options: {n_train: 2, n_test: 1}, max_steps: 4}\nrollout: {policy: policy}\n"
    )
    argv = ["run", "--config", str(cfg), "--stage", "rollout", "--stage", "diagnose"]
    assert main(argv) == 0
    assert "── diagnose done" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    line = f"trace-rl run --config {cfg} --stage rollout --stage diagnose"
    assert manifest["commands"] == [line]  # once, not once per stage, and no stage's own argv
    assert {name: s["command"] for name, s in manifest["stages"].items()} == {"rollout": line, "diagnose": line}
    assert main(["diagnose", "--run", str(tmp_path / "x"), "--rho", "0.2"]) == 0
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    own = f"trace-rl diagnose --run {tmp_path / 'x'} --rho 0.2"
    assert manifest["commands"] == [line, own] and manifest["stages"]["diagnose"]["command"] == own


def test_unknown_environment(capsys):
    assert main(["env", "check", "nowhere"]) == 2
    assert "unknown environment 'nowhere'" in capsys.readouterr().err


def test_malformed_config_names_the_field(tmp_path: Path):
    bad = tmp_path / "c.yaml"
    bad.write_text("rollout:\n  trials: many\n")
    with pytest.raises(UserError, match=r"rollout\.trials"):
        load_config(bad)
    bad.write_text("rollout: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("rolout:\n  trials: 2\n")
    with pytest.raises(UserError, match="rolout"):
        load_config(bad)
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_model_specs():
    assert model_from_spec("openai:qwen@http://127.0.0.1:8000/v1")[1].base_url == "http://127.0.0.1:8000/v1"
    assert model_from_spec("tiny")[1].kind == "tiny"
    assert model_from_spec("smollm2-135m")[1].kind == "local"
    with pytest.raises(UserError, match="unknown model 'gpt-9'"):
        model_from_spec("gpt-9")


def test_manifest_command_line_can_be_retyped():
    seen = []

    def cmd(
        ctx: typer.Context,
        run: Annotated[Path, typer.Argument()],
        config: Annotated[Path | None, typer.Option("--config", "-c")] = None,
        split: Annotated[list[str] | None, typer.Option("--split")] = None,
        task: Annotated[list[str] | None, typer.Option("--task")] = None,
        progress: Annotated[str, typer.Option("--progress")] = "auto",
        fresh: Annotated[bool, typer.Option("--fresh")] = False,
        html: Annotated[bool, typer.Option("--html/--no-html")] = True,
    ) -> None:
        seen.append(command_line(ctx))

    app = typer.Typer()
    app.command("rollout")(cmd)
    app.command("noop")(lambda: None)
    args = ["rollout", "r", "-c", "c.yaml", "--split", "train", "--split", "test", "--progress", "auto", "--fresh"]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert CliRunner().invoke(app, ["rollout", "r", "--task", "t 1", "--no-html", "--progress", "plain"]).exit_code == 0
    assert seen == [
        "trace-rl rollout r --config c.yaml --split train --split test --fresh",  # defaults are left out
        "trace-rl rollout r --task 't 1' --progress plain --no-html",
    ]


def test_headline_prints_a_dash_for_a_bound_that_was_not_computed(tmp_path: Path):
    from trace_rl.artifacts.evaluation import ArmResult, Comparison, PassKRow
    from trace_rl.artifacts.store import RunDir
    from trace_rl.pipeline import headline

    run = RunDir(tmp_path / "r")
    row = PassKRow(k=1, value=0.5, low=None, high=None)
    comparison = Comparison(env="library", split="test", tasks=2, trials=1, arms=[ArmResult(name="base", pass_k=[row])])
    comparison.save(run.comparison)
    assert headline(run)[1] == "  base   pass^1 0.500 [-, -]"


def test_an_infrastructure_failure_is_one_line_and_exit_1(capsys):
    """A model server that will not start is systemic: one line naming it (no traceback), exit 1 (rerun resumes)."""
    from trace_rl.cli.runner import run_app
    from trace_rl.errors import InfraError

    app = typer.Typer()

    @app.command()
    def serve() -> None:
        raise InfraError("connection", "could not start vLLM for /m (log /x.log): not healthy after 600 s:\nTAIL LINE")

    assert run_app(app, [], "trace-rl") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not start vLLM for /m" in err and "Traceback" not in err
    assert "TAIL LINE" not in err
