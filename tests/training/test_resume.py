"""Checkpoint and resume: a run killed mid-training continues from its newest checkpoint; a finished adapter is
skipped; the before/after evaluation and its figure are written once."""

from __future__ import annotations

import json

import pytest
from tests.training.train_toy import ScriptedSampler, ToyEnv, alternating
from transformers import TrainerCallback

from trace_rl.artifacts.store import RunDir
from trace_rl.config.train import TrainConfig
from trace_rl.train.stage import run_train
from trace_rl.training.trl_backend import TRLBackend

pytestmark = pytest.mark.filterwarnings("ignore")


class Killed(Exception):
    """Stands in for SIGKILL: raised before step 3 starts, after checkpoint-2 was written."""


class KillAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Killed


def test_killed_run_resumes_and_finished_adapter_is_skipped(tiny_dir, tokenizer, tmp_path):
    cfg = TrainConfig(
        model=str(tiny_dir),
        max_steps=3,
        num_generations=2,
        groups_per_step=2,
        micro_batch_size=2,
        learning_rate=1e-3,
        lora_r=4,
        lora_alpha=8,
        max_turn_tokens=12,
        max_episode_tokens=128,
        max_turns=2,
        bf16="false",
        save_steps=2,
        keep_fractions=[0.34],  # step 1 kept outside the rotation; save_interval becomes gcd(2, 1) = 1
        save_total_limit=1,
        resample_attempts=0,
        held_out_seeds=[1_000_000, 1_000_001],
        eval_trials=1,
    )
    run = RunDir(tmp_path / "run")
    env = ToyEnv("toy")

    def backend(*callbacks):
        sampler = ScriptedSampler(tokenizer, alternating(tokenizer))
        return TRLBackend(sampler_for=lambda trainer: sampler, callbacks=list(callbacks))

    with pytest.raises(Killed):
        run_train(run, cfg, envs={"toy": env}, backend=backend(KillAt(2)))
    adapter = run.root / "adapters" / "toy"
    checkpoints = run.root / "train" / "toy" / "checkpoints"
    assert (checkpoints / "checkpoint-2").is_dir() and not (adapter / "done.json").exists()
    assert (adapter / "eval_before.json").is_file()  # the base evaluation ran before training, once
    before_mtime = (adapter / "eval_before.json").stat().st_mtime_ns
    assert run.manifest().stages["train"].status == "failed"

    kept = run.root / "train" / "toy" / "kept"
    assert sorted(p.name for p in kept.iterdir()) == ["step-1"]  # outlived the rotation (limit 1) to checkpoint-2
    assert not (checkpoints / "checkpoint-1").exists()
    assert {p.name for p in (kept / "step-1").iterdir()} >= {"adapter_model.safetensors", "adapter_config.json"}

    (result,) = run_train(run, cfg, envs={"toy": env}, backend=backend())
    assert result.resumed_from is not None and result.resumed_from.endswith("checkpoint-2")
    assert result.steps == 3 and not result.skipped
    assert (adapter / "eval_before.json").stat().st_mtime_ns == before_mtime  # reused, not recomputed
    for name in (
        "adapter_model.safetensors",
        "adapter_config.json",
        "train_config.json",
        "metrics.jsonl",
        "eval_after.json",
        "eval.png",
        "training.png",
        "done.json",
    ):
        assert (adapter / name).is_file(), name
    steps = sorted(
        r["step"]
        for r in map(json.loads, (adapter / "metrics.jsonl").read_text().splitlines())
        if isinstance(r["step"], int)
    )
    assert steps[-1] == 3 and set(steps) == {1, 2, 3}
    after = json.loads((adapter / "eval_after.json").read_text())
    assert after["episodes"] == 2 and 0.0 <= after["mean_reward"] <= 1.0 and after["gold_call_logprob"] < 0
    config = json.loads((adapter / "train_config.json").read_text())
    assert config["batch"] == {"micro": 2, "accumulation": 2, "groups": 2}
    assert run.manifest().stages["train"].status == "done"

    (again,) = run_train(run, cfg, envs={"toy": env}, backend=backend())
    assert again.skipped
    assert run.manifest().stages["train"].summary["skipped_done"] == ["toy"]
