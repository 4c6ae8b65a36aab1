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
from tests.test_pipeline import CONFIG as PIPELINE_CONFIG

from trace_rl.cli.app import main

# tests/test_pipeline.py's run (the tiny model, acceptance window opened, one GRPO step), on the guess package and
# with the default diagnose section (the structural analyzer, which gives way without gold actions)
CONFIG = (
    PIPELINE_CONFIG.replace("name: pipe", "name: guess")
    .replace(
        "env: {{name: library, options: {{n_train: 4, n_test: 3}}, max_steps: 8, max_errors: 3}}",
        'env: {{name: "openenv:{guess}", options: {{n_train: 4, n_test: 3, test_offset: 100}}, max_steps: 6, '
        "max_errors: 3}}",
    )
    .replace("diagnose: {{analyst: structural}}\n", "")
)


def test_every_stage_runs_on_an_imported_openenv_environment(tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.format(root=tmp_path / "runs", guess=GUESS))
    assert main(["run", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    for stage in ("rollout", "diagnose", "synthesize", "train", "route", "evaluate"):
        assert f"── {stage} done" in out
    run = tmp_path / "runs" / "guess"
    assert json.loads((run / "manifest.json").read_text())["config"]["env"]["name"] == f"openenv:{GUESS}"

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
        assert calibration and all("return" in c["reward_info"]["details"] for c in calibration)  # its own score
        assert (run / "adapters" / folder.name / "adapter_config.json").is_file()

    comparison = json.loads((run / "evaluate" / "comparison.json").read_text())
    arms = {a["name"]: a for a in comparison["arms"]}
    assert set(arms) == {"base", "trace"}
    (pass1,) = [p for p in arms["trace"]["pass_k"] if p["k"] == 1]
    assert pass1["tasks"] == 3
