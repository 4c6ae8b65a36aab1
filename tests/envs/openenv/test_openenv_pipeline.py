"""`trace-rl run` on an imported OpenEnv environment (the guess package in OpenEnv's layout) with the real tiny model:
rollout, diagnosis without gold actions (the behavioral analyzer, chosen because no task has any), a capability
environment over the environment's fresh seeds (`target_reseed`, scored by its own reward), one GRPO step, routing
and the TRACE row of evaluate — every stage of TRACE on a target that only speaks OpenEnv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv")

from tests.envs.openenv.test_openenv_import import GUESS

from trace_rl.cli.app import main

CONFIG = """
run: {{name: guess, runs_dir: {root}}}
models:
  policy: {{kind: tiny, model: tiny, temperature: 0.7, max_tokens: 16, device: cpu}}
env: {{name: "openenv:{guess}", options: {{n_train: 4, n_test: 3, test_offset: 100}}, max_steps: 6, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 1, concurrency: 2}}
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


def test_every_stage_runs_on_an_imported_openenv_environment(tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(root=tmp_path / "runs", guess=GUESS))
    assert main(["run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    for stage in ("rollout", "diagnose", "synthesize", "train", "route", "evaluate"):
        assert f"── {stage} done" in out
    run = tmp_path / "runs" / "guess"

    capabilities = json.loads((run / "diagnose" / "capabilities.json").read_text())
    assert any("behavioral" in w for w in capabilities["warnings"])
    assert capabilities["analyst"] == "behavioral"
    # the tiny model answers in prose: every failed episode lacks acting through the tools (Δ = 1, coverage 1)
    selected = [c["name"] for c in capabilities["selected"]]
    assert "acting_through_tools" in selected

    folders = sorted(p.parent for p in (run / "envs").glob("*/spec.json"))
    assert folders
    for folder in folders:
        spec = json.loads((folder / "spec.json").read_text())
        assert spec["generator"]["kind"] == "target_reseed" and spec["reward"]["source"] == "target"
        calibration = [json.loads(x) for x in (folder / "calibration" / "trajectories.jsonl").read_text().splitlines()]
        assert calibration and all(c["reward_info"]["details"]["steps"] >= 0 for c in calibration)
        assert (run / "adapters" / folder.name / "adapter_config.json").is_file()

    comparison = json.loads((run / "evaluate" / "comparison.json").read_text())
    arms = {a["name"]: a for a in comparison["arms"]}
    assert set(arms) == {"base", "trace"}
    (pass1,) = [p for p in arms["trace"]["pass_k"] if p["k"] == 1]
    assert pass1["tasks"] == 3
