"""Slow: `trace-rl run` on the tiny model under Ray produces the local executor's artefacts, and real TRL trainings
of two capabilities run as parallel Ray tasks (run with `-m slow`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_rl.artifacts.store import RunDir
from trace_rl.cli.app import main
from trace_rl.config import ExecutorConfig
from trace_rl.config.train import TrainConfig
from trace_rl.train.stage import run_train
from trace_rl.training.selection import env_from_spec

from .helpers import stable

pytestmark = pytest.mark.slow

CONFIG = """
run: {{name: pipe, runs_dir: {root}}}
models:
  policy: {{kind: tiny, model: tiny, temperature: 0.7, max_tokens: 16, device: cpu}}
env: {{name: library, options: {{n_train: 4, n_test: 3}}, max_steps: 8, max_errors: 3}}
rollout: {{policy: policy, user: scripted, split: train, trials: 2, concurrency: 2}}
executor: {executor}
diagnose: {{analyst: structural}}
synthesize: {{generator: target, author: null, policy: policy, groups: 2, samples: 2, max_attempts: 1,
             max_tokens: 16, concurrency: 2, validation_seeds: 2}}
train: {{model: tiny, max_steps: 1, num_generations: 2, groups_per_step: 1, max_turn_tokens: 16,
        max_episode_tokens: 256, max_turns: 2, eval_trials: 1, held_out_seeds: [1000001], device: cpu,
        resample_attempts: 0}}
route: {{tasks_per_env: 2}}
evaluate: {{arms: [base, trace], trials: 2, concurrency: 2, curve: {{enabled: false}}}}
"""


def run_pipeline(root: Path, executor: str) -> RunDir:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "c.yaml"
    config.write_text(CONFIG.format(root=root / "runs", executor=executor))
    assert main(["run", "--config", str(config)]) == 0
    return RunDir(root / "runs" / "pipe")


def files(run: RunDir) -> set[str]:
    return {str(p.relative_to(run.root)) for p in run.root.rglob("*") if p.is_file() and not p.name.startswith(".")}


def test_pipeline_on_ray_produces_the_local_artefacts(tmp_path: Path, ray_cluster, capsys) -> None:
    local = run_pipeline(tmp_path / "local", "{kind: local}")
    ray = run_pipeline(tmp_path / "ray", "{kind: ray, num_workers: 2}")
    assert "preflight: executor: ray" in capsys.readouterr().out
    assert files(ray) == files(local)
    for store in ("rollout/trajectories.jsonl", "evaluate/arms/base.jsonl"):
        ours, theirs = ray.jsonl(store), local.jsonl(store)
        assert len(ours.records()) == len(ours.latest()) == len(theirs.latest())  # each (task, trial) once
        # the tiny model samples with a seed per (episode, step): the same episodes, token for token (log-probs
        # agree to 4 decimals: Ray workers run torch with another thread count)
        assert {k: stable(v, 4) for k, v in ours.latest().items()} == {
            k: stable(v, 4) for k, v in theirs.latest().items()
        }
    a = json.loads((ray.root / "evaluate" / "comparison.json").read_text())
    b = json.loads((local.root / "evaluate" / "comparison.json").read_text())
    assert [x["pass_k"] for x in a["arms"]] == [x["pass_k"] for x in b["arms"]]

    before = (ray.root / "rollout" / "trajectories.jsonl").read_bytes()
    config = tmp_path / "ray" / "c.yaml"
    assert main(["run", "--config", str(config), "--stage", "rollout", "--stage", "evaluate"]) == 0
    assert "0 episodes run, 8 already done" in capsys.readouterr().out  # resume under Ray: nothing rerun
    assert (ray.root / "rollout" / "trajectories.jsonl").read_bytes() == before


def test_two_capabilities_train_in_parallel_on_ray_with_trl(tmp_path: Path, ray_cluster) -> None:
    cfg = TrainConfig(
        model="tiny",
        max_steps=2,
        num_generations=2,
        groups_per_step=1,
        max_turn_tokens=16,
        max_episode_tokens=256,
        max_turns=2,
        eval_trials=1,
        held_out_seeds=[1000001],
        device="cpu",
        resample_attempts=0,
        save_steps=1,
    )
    specs = {"lookup_answer": "library:lookup_answer", "precondition_refusal": "library:precondition_refusal"}
    out = {}
    for kind in ("local", "ray"):
        envs = {name: env_from_spec(spec) for name, spec in specs.items()}
        run = RunDir(tmp_path / kind)
        results = run_train(run, cfg, envs=envs, executor=ExecutorConfig(kind=kind, cpus_per_train_job=1))
        assert [r.capability for r in results] == list(specs) and all(r.steps == 2 for r in results)
        out[kind] = run
    for name in specs:
        for kind in ("local", "ray"):
            folder = out[kind].root / "adapters" / name
            assert (folder / "adapter_model.safetensors").is_file() and (folder / "done.json").is_file()
        rows = [len((out[k].root / "adapters" / name / "metrics.jsonl").read_text().splitlines()) for k in out]
        assert rows[0] == rows[1]
    assert out["ray"].manifest().stages["train"].summary["trained"] == list(specs)
