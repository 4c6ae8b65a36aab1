"""`trace-rl run`: every stage in order on a real tiny model, then a rerun that resumes everything and adds nothing."""

from __future__ import annotations

import json
from pathlib import Path

from trace_rl.cli import main

CONFIG = """
run: {{name: pipe, runs_dir: {root}}}
models:
  policy: {{kind: tiny, model: tiny, temperature: 0.7, max_tokens: 16, device: cpu}}
env: {{name: library, options: {{n_train: 4, n_test: 3}}, max_steps: 8, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 1, concurrency: 2}}
stages:
  diagnose: {{analyst: structural}}
  synthesize: {{generator: target, author: null, policy: policy, groups: 2, samples: 2, max_attempts: 1,
               max_tokens: 16, concurrency: 2, validation_seeds: 2}}
  train: {{model: tiny, max_steps: 1, num_generations: 2, groups_per_step: 1, max_turn_tokens: 16,
          max_episode_tokens: 256, max_turns: 2, eval_trials: 1, held_out_seeds: [1000001], device: cpu,
          resample_attempts: 0}}
  route: {{tasks_per_env: 2}}
  evaluate: {{arms: [base, trace], trials: 1, concurrency: 2, curve: {{enabled: false}}}}
"""


def test_run_goes_through_every_stage_and_resumes(tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(root=tmp_path / "runs"))
    assert main(["run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "pipe"
    for stage in ("rollout", "diagnose", "synthesize", "train", "evaluate", "report"):
        assert f"── {stage} done" in out
    assert "base   pass^1" in out and (run / "report.html").exists()
    assert "trace  skipped: no trained capability adapters" in out  # the headline says why TRACE has no row
    text = (run / "evaluate" / "comparison.json").read_text()
    assert "base" in {a["name"] for a in json.loads(text)["arms"]}
    assert "no trained capability adapters" in text  # the tiny model passes no calibration: TRACE skipped, said why
    manifest = json.loads((run / "manifest.json").read_text())
    assert {"rollout", "diagnose", "synthesize", "train", "evaluate"} <= set(manifest["stages"])
    before = (run / "rollout" / "trajectories.jsonl").read_text()

    assert main(["run", "--config", str(config)]) == 0  # everything is done: resumes, adds nothing
    assert "0 episodes run, 4 already done" in capsys.readouterr().out
    assert (run / "rollout" / "trajectories.jsonl").read_text() == before
