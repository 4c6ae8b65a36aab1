"""The CUDA path (skipped without a GPU): bf16 auto-enabled, rollouts sampled on the GPU by the trainer's own PEFT model
(`HFSampler`, not scripted), an adapter written, and the before/after evaluation run on the device."""

from __future__ import annotations

import json

import pytest
import torch
from tests.training.train_toy import ToyEnv

from trace_rl.config.train import TrainConfig
from trace_rl.training.trl_backend import TRLBackend
from trace_rl.types import EpisodeScore

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore"),
]


class LengthEnv(ToyEnv):
    """A random model never succeeds, so reward the length of what it says (rewards vary, gradients flow)."""

    async def score(self, env, task, messages, termination):
        text = sum(len(m.content or "") for m in messages if m.role == "assistant")
        return EpisodeScore(shaped=min(1.0, text / 200), success=False)


def test_cuda_bf16_training_with_the_trainers_own_sampler(tiny_dir, tmp_path):
    cfg = TrainConfig(
        model=str(tiny_dir),
        max_steps=3,
        num_generations=4,
        groups_per_step=2,
        learning_rate=1e-3,
        lora_r=8,
        lora_alpha=16,
        max_turn_tokens=24,
        max_episode_tokens=160,
        max_turns=2,
        filter_on="none",
        resample_attempts=0,
        held_out_seeds=[1_000_000, 1_000_001],
        eval_trials=2,
        save_steps=2,
    )
    trainers = []
    result = TRLBackend(on_trainer=trainers.append).train(
        LengthEnv("toy_gpu"), cfg, adapter_dir=tmp_path / "adapter", work_dir=tmp_path / "work"
    )
    record = json.loads((tmp_path / "adapter" / "train_config.json").read_text())
    assert record["device"] == "cuda" and record["bf16"] is (torch.cuda.is_bf16_supported())
    assert result.steps == 3 and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    model = trainers[0].model
    assert next(model.parameters()).is_cuda
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert max(p.abs().max().item() for p in lora_b) > 0
    assert result.eval_after is not None and result.eval_after["episodes"] == 4
    lines = [json.loads(x) for x in (tmp_path / "adapter" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if isinstance(r["step"], int)] == [1, 2, 3]
    print("GPU s/step:", [round(r["step_seconds"], 3) for r in lines if isinstance(r["step"], int)])
