"""End-to-end learning tests on the tiny model through `TRLBackend` (TRL GRPOTrainer + PEFT + our rollout_func).

Rollouts are scripted (a random model never emits a tool call): each group picks `pick(red)` and `pick(blue)` half the
time each, then says it is done; the environment decides which colour succeeds. After a few GRPO steps the adapter must
have moved the policy toward the rewarded call — and the other way when the reward is flipped — while the base weights
stay bit-identical. So the environment's reward reached the loss, through env_mask and the extra `env_reward` key.
"""

from __future__ import annotations

import json

import pytest
import torch
from tests.training.train_toy import BLUE, RED, ScriptedSampler, ToyEnv, alternating

from trace_rl.config.train import TrainConfig
from trace_rl.training.trl_backend import TRLBackend

pytestmark = pytest.mark.filterwarnings("ignore")


class GoldEnv(ToyEnv):
    """The toy environment with a configurable winning colour."""

    def __init__(self, gold: str) -> None:
        super().__init__(name=f"toy_{gold}")
        self.gold = gold

    def make_task(self, seed):
        task = super().make_task(seed)
        task.evaluation_criteria.actions[0].arguments["color"] = self.gold
        return task


def cfg_for(tiny_dir, **kw) -> TrainConfig:
    base = dict(
        model=str(tiny_dir),
        max_steps=4,
        num_generations=4,
        groups_per_step=1,
        learning_rate=5e-3,
        lora_r=8,
        lora_alpha=16,
        max_turn_tokens=48,
        max_episode_tokens=256,
        eval=False,
        bf16="false",
        save_steps=100,
        resample_attempts=0,
        log_trajectories=True,
    )
    base.update(kw)
    return TrainConfig(**base)


def margin(model, prompt, sampler) -> float:
    """log p(red call) − log p(blue call) after `prompt`."""
    out = []
    for text in (RED, BLUE):
        ids = [*sampler.encode(text), sampler.eos]
        x = torch.tensor([prompt + ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(x).logits[0, len(prompt) - 1 : -1].float(), -1)
        out.append(logp.gather(-1, torch.tensor(ids).unsqueeze(-1)).sum().item())
    return out[0] - out[1]


def test_reward_moves_the_preferred_tool_call_and_only_lora_changes(tiny_dir, tokenizer, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    shifts = {}
    for gold in ("red", "blue"):
        sampler = ScriptedSampler(tokenizer, alternating(tokenizer))
        trainers = []
        backend = TRLBackend(sampler_for=lambda trainer, s=sampler: s, on_trainer=trainers.append)
        out = tmp_path / gold
        result = backend.train(GoldEnv(gold), cfg_for(tiny_dir), adapter_dir=out / "adapter", work_dir=out / "work")
        assert result.steps == 4 and (out / "adapter" / "adapter_model.safetensors").is_file()
        # base weights inside the trained PEFT model are unchanged; LoRA weights moved
        model = trainers[0].model
        for name, param in model.named_parameters():
            if "lora_" in name:
                continue
            key = name.replace("base_model.model.", "").replace(".base_layer", "")
            assert torch.equal(param.detach().cpu(), base_state[key]), name
        lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
        assert max(p.abs().max().item() for p in lora_b) > 0  # B starts at zero
        prompt = sampler.contexts[0]
        tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), str(out / "adapter"))
        shifts[gold] = margin(tuned, prompt, sampler) - margin(base, prompt, sampler)
        # metrics: reward and the rollout's own statistics reached the JSONL
        lines = [json.loads(x) for x in (out / "adapter" / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in lines if isinstance(r["step"], int)]
        assert [r["step"] for r in steps] == [1, 2, 3, 4]
        for key in (
            "reward",
            "frac_reward_zero_std",
            "clip_ratio/region_mean",
            "groups/frac_dropped",
            "env/success_rate",
            "tokens/model",
            "tokens/env",
            "step_seconds",
        ):
            assert key in steps[0], key
        assert steps[0]["env/success_rate"] == 0.5
        assert (out / "work" / "trajectories.jsonl").is_file()
    assert shifts["red"] > 0.5, shifts  # rewarding red raises log p(red) − log p(blue)
    assert shifts["blue"] < -0.5, shifts  # rewarding blue lowers it
