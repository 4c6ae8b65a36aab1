"""The run the route tests share: adapters for a synthesized library capability and a library-family stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.config import EnvConfig, ModelConfig, TraceConfig


def write_fake_adapter(run: RunDir, name: str) -> None:
    folder = run.root / "adapters" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    atomic_write_json(folder / "train_config.json", {"config": {"model": "tiny"}})


@pytest.fixture
def library_run(tmp_path: Path) -> RunDir:
    """Adapters for a synthesized library capability (`multi_step_completion`, envs/ folder) and for the
    `lookup_answer` family stand-in (no envs/ folder)."""
    from trace_rl.artifacts.environments import write_env_spec
    from trace_rl.config.synthesize import SynthesizeConfig
    from trace_rl.envs.registry import load_domain
    from trace_rl.envs.synthetic import load_capability_env
    from trace_rl.synthesize.evidence import Evidence
    from trace_rl.synthesize.from_target import target_spec
    from trace_rl.types import Capability

    env_cfg = EnvConfig(name="library", options={"n_train": 20, "n_test": 10})
    run = RunDir(tmp_path / "run")
    cfg = TraceConfig(env=env_cfg, models={"policy": ModelConfig(kind="scripted")})
    run.ensure(config=cfg.model_dump(mode="json"))
    domain = load_domain("library", env_cfg)
    cap = Capability(name="multi_step_completion", definition="Completing every one of several requested changes.")
    evidence = Evidence(cap, tasks=[t for t in domain.tasks("train") if t.metadata["family"] == "multi_step"][:2])
    spec, why = target_spec(evidence, cap.name, env_cfg, domain, SynthesizeConfig(train_seeds=12, test_seeds=6))
    assert spec is not None, why
    # one decision without contrast tasks: every held-out task is a multi-request message (confirm_before_change
    # would add catalog questions, which a router keyed on the opening cannot tell from the lookups)
    spec.generator.params["decisions"] = {"finish_every_request": 1.0}
    write_env_spec(run.env(cap.name), spec)
    assert load_capability_env(run.root / "envs" / cap.name).tasks("test")
    for name in ("lookup_answer", "multi_step_completion"):
        write_fake_adapter(run, name)
    return run
