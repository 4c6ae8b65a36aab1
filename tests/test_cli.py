"""User errors from the command line are one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trace_rl.cli import main
from trace_rl.config import load_config, model_from_spec
from trace_rl.errors import UserError


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
    cfg.write_text(f"run: {{name: x, runs_dir: {tmp_path}}}\nstages:\n  train: {{stepz: 3}}\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: stages.train: stepz") and "\n" not in err
    assert not (tmp_path / "x").exists()


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
    from trace_rl.cli import _command_line

    line = _command_line("rollout", {"config": "c.yaml", "task": (), "split": ["train", "test"], "progress": "auto",
                                     "resume": True, "dry_run": False})  # fmt: skip
    assert line == "trace-rl rollout --config c.yaml --split train --split test --progress auto --resume"
    assert _command_line("rollout", {"task": ("t 1",)}) == "trace-rl rollout --task 't 1'"
