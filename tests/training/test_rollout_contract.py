"""Contract tests on TRL's `rollout_func` (trl==1.16.0, pinned): they fail loudly if upstream changes.

- `prompts` holds each dataset prompt repeated num_generations times, consecutively (the docstring says otherwise);
- one completion per entry is returned; extra keys and dataset columns reach the reward functions as kwargs;
- `env_mask` multiplies the loss mask: all-zero masks leave the LoRA weights untouched, ones move them.
"""

from __future__ import annotations

from importlib.metadata import version

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")


def _trainer(tiny_dir, tokenizer, tmp_path, rollout_func, reward_func, *, lr=1e-2):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"prompt {i}"}], "tag": i} for i in range(2)])
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        learning_rate=lr,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        max_completion_length=16,
        shuffle_dataset=False,
        loss_type="grpo",
    )
    return GRPOTrainer(
        model=str(tiny_dir),
        reward_funcs=[reward_func],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        rollout_func=rollout_func,
    )


def _make_rollout(tokenizer, seen, mask_value):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    body = tokenizer("Done, thanks", add_special_tokens=False)["input_ids"]

    def rollout(prompts, trainer):
        seen.append(prompts)
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        completion = [*body, eos]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [completion for _ in prompts],
            "logprobs": [[0.0] * len(completion) for _ in prompts],
            "env_mask": [[mask_value] * len(completion) for _ in prompts],
            "env_reward": [float(i % 2) for i in range(len(prompts))],
            "marker": [f"m{i}" for i in range(len(prompts))],
        }

    return rollout


def _lora_params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


def test_trl_version_is_pinned():
    assert version("trl") == "1.16.0"


def test_prompts_are_duplicated_and_extra_keys_reach_rewards(tiny_dir, tokenizer, tmp_path):
    seen, reward_kwargs = [], []

    def reward(completions, env_reward, **kwargs):
        reward_kwargs.append(kwargs)
        return env_reward

    trainer = _trainer(tiny_dir, tokenizer, tmp_path, _make_rollout(tokenizer, seen, 1), reward)
    trainer.train()
    (prompts,) = seen
    assert len(prompts) == 4
    texts = [p[0]["content"] for p in prompts]
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]  # consecutive K duplicates
    kwargs = reward_kwargs[0]
    assert kwargs["marker"] == ["m0", "m1", "m2", "m3"]  # an extra rollout key, one value per completion
    assert kwargs["tag"][0] == kwargs["tag"][1] and kwargs["tag"][2] == kwargs["tag"][3]  # dataset column, repeated
    assert "env_mask" not in kwargs  # consumed by the trainer, not forwarded


def test_env_mask_zero_keeps_lora_weights_and_one_moves_them(tiny_dir, tokenizer, tmp_path):
    def reward(completions, env_reward, **kwargs):
        return env_reward

    moved = {}
    for mask_value in (0, 1):
        trainer = _trainer(
            tiny_dir, tokenizer, tmp_path / str(mask_value), _make_rollout(tokenizer, [], mask_value), reward
        )
        before = _lora_params(trainer)
        trainer.train()
        after = _lora_params(trainer)
        moved[mask_value] = max((after[n] - before[n]).abs().max().item() for n in before)
    assert moved[0] == 0.0
    assert moved[1] > 1e-4
    assert torch.isfinite(torch.tensor(moved[1]))
