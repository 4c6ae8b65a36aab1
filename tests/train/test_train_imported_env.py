"""`trace-rl train --env <environment name>`: GRPO on an imported environment's train split (an OpenEnv package run
in process), scored by the environment itself; an unknown environment is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.cli.app import main

GUESS = Path(__file__).resolve().parents[1] / "envs" / "openenv" / "guess_env"


def test_one_grpo_step_on_an_openenv_environment(tmp_path) -> None:
    pytest.importorskip("openenv")
    run = tmp_path / "run"
    argv = ["train", "--run", str(run), "--env", f"openenv:{GUESS}", "--model", "tiny", "--steps", "1", "-k", "2"]
    argv += ["-g", "1", "--max-turn-tokens", "8", "--max-episode-tokens", "64", "--max-turns", "2", "--held-out", "1"]
    assert main([*argv, "--eval-trials", "1"]) == 0
    adapters = [p for p in (run / "adapters").iterdir() if p.is_dir()]
    assert len(adapters) == 1 and adapters[0].name.startswith("openenv_")
    rows = [json.loads(line) for line in (adapters[0] / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert rows, "no training metrics were written"


def test_an_unknown_environment_is_one_line(tmp_path, capsys) -> None:
    argv = ["train", "--run", str(tmp_path / "r"), "--env", "nowhere:x", "--model", "tiny", "--steps", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown training environment 'nowhere:x'" in err
