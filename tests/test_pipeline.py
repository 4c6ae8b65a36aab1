"""`trace-rl run`: every stage in order on a real tiny model, through to a TRACE row, then a rerun that resumes
everything and adds nothing.

The tiny random model solves nothing, so the default calibration thresholds (mean reward and success in [0.2, 0.6])
would turn every capability environment away and leave TRACE without adapters. This run opens the acceptance window
as a user could (`synthesize.acceptance`), so the environments pass calibration, one GRPO step trains an adapter per
capability, the router (the tiny model's label logits) routes each held-out task, and evaluate reports the TRACE arm.
"""

from __future__ import annotations

import json
from pathlib import Path

from trace_rl.cli.app import main

CONFIG = """
run: {{name: pipe, runs_dir: {root}}}
models:
  policy: {{kind: tiny, model: tiny, temperature: 0.7, max_tokens: 16, device: cpu}}
env: {{name: library, options: {{n_train: 4, n_test: 3}}, max_steps: 8, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 1, concurrency: 2}}
diagnose: {{analyst: structural}}
synthesize:
  generator: target
  author: null
  policy: policy
  groups: 2
  samples: 2
  max_attempts: 1
  max_tokens: 16
  concurrency: 2
  validation_seeds: 2
  acceptance: {{reward_range: [0.0, 1.0], success_range: [0.0, 1.0], min_std: 0.0, min_informative: 0.0,
               max_constant: 1.0, max_all_success: null, max_all_zero: null}}
train: {{model: tiny, max_steps: 1, num_generations: 2, groups_per_step: 1, max_turn_tokens: 16,
        max_episode_tokens: 256, max_turns: 2, eval_trials: 1, held_out_seeds: [1000001], device: cpu,
        resample_attempts: 0}}
route: {{tasks_per_env: 2}}
evaluate: {{arms: [base, trace], trials: 1, concurrency: 2, curve: {{enabled: false}}}}
"""


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_run_goes_through_every_stage_to_trace_and_resumes(tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(root=tmp_path / "runs"))
    assert main(["run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "pipe"
    for stage in ("rollout", "diagnose", "synthesize", "train", "route", "evaluate", "report"):
        assert f"── {stage} done" in out
    assert "base   pass^1" in out and "trace  pass^1" in out and (run / "report.html").exists()

    # synthesize: the environments passed calibration; train: each has an adapter
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in (run / "envs").glob("*/status.json")}
    ready = sorted(name for name, status in statuses.items() if status == "ready")
    assert ready, "no capability environment passed calibration"
    for name in ready:
        assert json.loads((run / "envs" / name / "calibration.json").read_text())["accepted"] is True
        assert (run / "adapters" / name / "adapter_config.json").is_file()
    assert (run / "route" / "router.json").is_file()

    # evaluate: a TRACE row with pass^1 and its interval, on the same tasks as base
    comparison = json.loads((run / "evaluate" / "comparison.json").read_text())
    arms = {a["name"]: a for a in comparison["arms"]}
    assert set(arms) == {"base", "trace"}
    (pass1,) = [p for p in arms["trace"]["pass_k"] if p["k"] == 1]
    assert pass1["tasks"] == 3 and pass1["low"] <= pass1["value"] <= pass1["high"]
    assert sorted(arms["trace"]["adapters"]) == ready
    # the tiny model's label logits favour the first label, which is an adapter (base is always last), so every
    # held-out episode runs on a trained adapter; the route each episode took is recorded with it
    episodes = _records(run / "evaluate" / "arms" / "trace.jsonl")
    assert len(episodes) == 3
    for episode in episodes:
        assert episode["adapter"] in ready
        assert episode["metadata"]["route"]["name"] == episode["adapter"]
    assert sum(arms["trace"]["details"]["routes"].get(name, 0) for name in ready) == 3

    manifest = json.loads((run / "manifest.json").read_text())
    assert {"rollout", "diagnose", "synthesize", "train", "route", "evaluate"} <= set(manifest["stages"])
    kept = [run / "rollout" / "trajectories.jsonl", *(run / "evaluate" / "arms").glob("*.jsonl")]
    kept += (run / "adapters").glob("*/adapter_model.safetensors")
    done = {p: p.read_bytes() for p in kept}

    assert main(["run", "--config", str(config)]) == 0  # everything is done: resumes, adds nothing
    out = capsys.readouterr().out
    assert "0 episodes run, 4 already done" in out
    assert "base: 0 episodes run, 3 already done" in out and "trace: 0 episodes run, 3 already done" in out
    assert all(f"{name}: already trained" in out for name in ready)
    assert {p: p.read_bytes() for p in done} == done
