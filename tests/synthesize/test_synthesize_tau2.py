"""The stage on τ² retail (offline, validation only): generator 1 re-targets train tasks; test ids are refused."""

from __future__ import annotations

import pytest
from tests.artifacts.builders import write_capabilities_file

from trace_rl.artifacts.store import RunDir
from trace_rl.config import EnvConfig
from trace_rl.config.synthesize import SynthesizeConfig
from trace_rl.envs.registry import load_domain
from trace_rl.errors import UserError
from trace_rl.synthesize.stage import run_synthesize
from trace_rl.types import Capability

from .synth_helpers import read_json


def test_retail_capability_environment(tmp_path):
    cfg = EnvConfig(name="tau2:retail", reward_basis=["DB", "COMMUNICATE"])
    try:
        domain = load_domain(cfg.name, cfg)
        train, test = domain.tasks("train"), domain.tasks("test")
    except UserError as exc:
        pytest.skip(f"τ² data not available: {exc}")
    run = RunDir(tmp_path / "run")
    run.ensure(config={"env": cfg.model_dump(mode="json")})
    cap = Capability(
        name="multi_step_task_completion",
        definition="Finishing every requested change in one conversation instead of stopping after the first.",
        example_task_ids=[t.id for t in train[:6]] + [test[0].id],
        status="selected",
    )
    write_capabilities_file(run, [cap])
    syn = SynthesizeConfig(calibrate=False, validation_seeds=5, train_seeds=12, test_seeds=4)
    report = run_synthesize(run, None, {}, syn=syn)
    folder = run.root / "envs" / cap.name
    assert report["capabilities"][cap.name]["status"] == "ready", read_json(folder / "status.json")
    spec = read_json(folder / "spec.json")
    assert (
        spec["generator"]["kind"] == "tau2_variants" and spec["evidence"]["capability_type"] == "multi_step_completion"
    )
    assert test[0].id not in spec["generator"]["params"]["sources"]
    assert any(f"task {test[0].id}" in d for d in spec["evidence"]["dropped"])
    assert read_json(folder / "leak.json")["ok"] and read_json(folder / "validation.json")["attempts"][-1]["ok"]
