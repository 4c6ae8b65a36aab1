"""`synthesize_command` (registered as `trace-rl synthesize` by cli.py): flags over the run's recorded config."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from trace_rl.cli.synthesize import synthesize_command
from trace_rl.errors import UserError

from .synth_helpers import make_library_run, read_json

app = typer.Typer()
app.command("synthesize")(synthesize_command)
app.command("noop")(lambda: None)


def test_command_validates_only_with_no_calibrate(tmp_path):
    run = make_library_run(tmp_path / "run", ["multi_step_completion", "tool_calling_precision"])
    config = tmp_path / "config.yaml"
    config.write_text("synthesize:\n  validation_seeds: 4\n  train_seeds: 16\n  test_seeds: 4\n")
    result = CliRunner().invoke(
        app,
        [
            "synthesize",
            "--run",
            str(run.root),
            "--capability",
            "multi_step_completion",
            "--no-calibrate",
            "--generator",
            "target",
            "--config",
            str(config),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "1/1 environments ready" in result.output
    assert read_json(run.root / "envs" / "multi_step_completion" / "status.json")["status"] == "ready"
    assert not (run.root / "envs" / "tool_calling_precision").exists()
    assert any(c.startswith("trace-rl synthesize --run") for c in run.manifest().commands)


def test_command_errors(tmp_path):
    run = make_library_run(tmp_path / "run", ["multi_step_completion"])
    missing = CliRunner().invoke(app, ["synthesize", "--run", str(tmp_path / "nope")])
    assert isinstance(missing.exception, UserError)
    no_policy = CliRunner().invoke(app, ["synthesize", "--run", str(run.root)])
    assert isinstance(no_policy.exception, UserError) and "policy" in str(no_policy.exception)
