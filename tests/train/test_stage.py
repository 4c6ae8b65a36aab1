"""The stage over a run directory (which environments train, skip logic, mix baseline) and the command's config."""

from __future__ import annotations

import pytest
from tests.training.train_toy import ToyEnv

from trace_rl.artifacts.environments import EnvStatus, write_env_status
from trace_rl.artifacts.layout import EnvLayout
from trace_rl.artifacts.store import RunDir, atomic_write_json
from trace_rl.cli.train import build_config, main
from trace_rl.config.train import TrainConfig
from trace_rl.errors import UserError
from trace_rl.train import stage as stage_mod
from trace_rl.training import selection
from trace_rl.training.envs import MixTrainEnv
from trace_rl.training.protocol import AdapterResult


class FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.trained: list[tuple[str, object]] = []
        self.configs: dict[str, TrainConfig] = {}

    def train(self, env, cfg, *, adapter_dir, work_dir):
        self.trained.append((env.name, env))
        self.configs[env.name] = cfg
        adapter_dir.mkdir(parents=True, exist_ok=True)
        (adapter_dir / "adapter_model.safetensors").write_bytes(b"x")
        atomic_write_json(adapter_dir / "done.json", {"capability": env.name})
        return AdapterResult(capability=env.name, adapter_dir=adapter_dir, steps=cfg.max_steps)


@pytest.fixture
def run(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    for name, status in (("alpha", "ready"), ("beta", "needs_attention"), ("gamma", None)):
        folder = run.root / "envs" / name
        folder.mkdir(parents=True)
        if status:
            write_env_status(EnvLayout(folder), EnvStatus(status=status))
    monkeypatch.setattr(selection, "load_synthesized_env", lambda folder: ToyEnv(folder.name))
    return run


def test_only_calibrated_envs_train_and_finished_ones_are_skipped(run):
    backend = FakeBackend()
    cfg = TrainConfig(max_steps=2)
    (result,) = stage_mod.run_train(run, cfg, backend=backend)
    assert [n for n, _ in backend.trained] == ["alpha"] and result.steps == 2
    summary = run.manifest().stages["train"].summary
    assert summary["trained"] == ["alpha"]
    assert summary["skipped_not_ready"] == ["beta (needs_attention)", "gamma (unfinished)"]
    (again,) = stage_mod.run_train(run, cfg, backend=backend)
    assert again.skipped and len(backend.trained) == 1
    with pytest.raises(UserError, match="beta"):
        stage_mod.run_train(run, cfg, capability="beta", backend=backend)


def test_mix_baseline_trains_one_adapter_on_all_envs(run):
    backend = FakeBackend()
    envs = {"alpha": ToyEnv("alpha"), "beta": ToyEnv("beta")}
    (result,) = stage_mod.run_train(run, TrainConfig(max_steps=1), envs=envs, mix=True, backend=backend)
    name, env = backend.trained[0]
    assert name == result.capability == "multi" and isinstance(env, MixTrainEnv)
    tasks = [env.make_task(s) for s in range(4)]
    assert [t.metadata["mix_index"] for t in tasks] == [0, 1, 0, 1]
    assert [t.metadata["seed"] for t in tasks] == [0, 0, 1, 1]  # each environment gets its own seed stream


def test_env_spec_list_trains_each_family_or_their_mix(run):
    backend = FakeBackend()
    spec = "library:lookup_answer, library:copy_selection"
    results = stage_mod.run_train(run, TrainConfig(max_steps=1), env_spec=spec, backend=backend)
    assert [r.capability for r in results] == ["lookup_answer", "copy_selection"]
    (mixed,) = stage_mod.run_train(run, TrainConfig(max_steps=1), env_spec=spec, mix=True, backend=backend)
    name, env = backend.trained[-1]
    assert name == mixed.capability == "multi" and [e.name for e in env.envs] == ["lookup_answer", "copy_selection"]
    with pytest.raises(UserError, match="unknown training environment 'nowhere:x'"):
        stage_mod.run_train(run, TrainConfig(max_steps=1), env_spec="library:lookup_answer,nowhere:x", backend=backend)


def test_a_capability_trains_with_its_own_settings(run):
    for name in ("alpha", "beta"):
        write_env_status(EnvLayout(run.root / "envs" / name), EnvStatus(status="ready"))
    backend = FakeBackend()
    cfg = TrainConfig(max_steps=4, max_turns=1, per_capability={"beta": {"max_turns": 2, "max_steps": 3}})
    results = stage_mod.run_train(run, cfg, backend=backend)
    assert {r.capability: r.steps for r in results} == {"alpha": 4, "beta": 3}
    assert (backend.configs["alpha"].max_turns, backend.configs["beta"].max_turns) == (1, 2)
    assert backend.configs["beta"].per_capability == {}  # the adapter's own settings, not the table
    assert run.manifest().stages["train"].config["per_capability"] == {"beta": {"max_turns": 2, "max_steps": 3}}


def test_config_precedence_and_one_line_errors(tmp_path, capsys):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("train:\n  max_steps: 7\n  learning_rate: 0.001\n  lora_r: 4\n")
    cfg = build_config(
        yaml_file, ["lora_r=8", "filter_on=reward", "epsilon_high=null"], {"max_steps": 3, "model": None}
    )
    assert (cfg.train.max_steps, cfg.train.learning_rate, cfg.train.lora_r) == (3, 0.001, 8)
    assert (cfg.train.filter_on, cfg.train.epsilon_high) == ("reward", None)
    with pytest.raises(UserError, match=r"train\.nope: Extra inputs"):
        build_config(None, ["nope=1"], {})
    assert main(["--run", str(tmp_path / "r"), "--set", "num_generations=1"]) == 2
    assert "num_generations" in capsys.readouterr().err


def test_build_config_without_config_uses_the_runs_recorded_config(tmp_path):
    run = RunDir(tmp_path / "recorded")
    run.ensure(config={"train": {"max_steps": 3}})
    assert build_config(None, [], {}, run).train.max_steps == 3
    assert build_config(None, [], {"max_steps": 5}, run).train.max_steps == 5
    fresh = RunDir(tmp_path / "fresh")  # no manifest yet (e.g. `train --env ...`): the defaults
    assert build_config(None, [], {}, fresh).train.max_steps == TrainConfig().max_steps
