"""Shared-prefix GRPO (`trace_rl.training.shared_prefix`) against TRL's unshared computation, on tiny fp32 models with
a random (non-zero) LoRA: per-token log-probs and entropies, the GRPO loss and every LoRA gradient agree to a relative
error <= 1e-5 on a batch of 2 groups x 4 rows with left-padded prompts of different lengths and completions of
different lengths; the fallbacks compute TRL's path and say why once; a real GRPOTrainer step trains the LoRA."""

from __future__ import annotations

import logging
import types

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")

REL_TOL = 1e-5


def _args(tmp_path, **over):
    from trl import GRPOConfig

    base = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=4,
        learning_rate=1e-2,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        max_completion_length=16,
        shuffle_dataset=False,
        loss_type="grpo",
        entropy_coef=0.05,  # entropies enter the loss, so their gradients are compared too
    )
    return GRPOConfig(**(base | over))


def _lora(init_random: bool = True):
    from peft import LoraConfig

    return LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"],
        task_type="CAUSAL_LM",
        init_lora_weights=not init_random,  # False: A and B both random, so every LoRA matrix gets a gradient
    )


def _no_rollout(prompts, trainer):
    raise AssertionError("these tests call the log-prob and loss methods directly")


def _zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def _trainer(model_dir, tmp_path, **over):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from trace_rl.training.shared_prefix import trainer_class

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"p{i}"}]} for i in range(2)])
    return trainer_class(True)(
        model=str(model_dir),
        reward_funcs=[_zero_reward],
        args=_args(tmp_path, **over),
        train_dataset=dataset,
        processing_class=tok,
        peft_config=_lora(),
        rollout_func=_no_rollout,
    )


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def trainer(request, tmp_path_factory):
    """A SharedPrefixGRPOTrainer on a tiny fp32 model: the default tiny qwen2, and a llama (SmolLM2's architecture)."""
    from trace_rl.models.resolve import tiny_path
    from trace_rl.models.tiny import build_tiny_model

    tmp = tmp_path_factory.mktemp(f"sp-{request.param}")
    model_dir = tiny_path() if request.param == "qwen2" else build_tiny_model(tmp / "tiny-llama", arch="llama")
    t = _trainer(model_dir, tmp)
    t.model.train()
    return t


def _batch(pad_id: int, seed: int = 0):
    """2 groups x 4 rows: prompts of 7 and 11 tokens left-padded to 11, completions of 1..12 tokens right-padded."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, 400, (7,), generator=g), torch.randint(5, 400, (11,), generator=g)]
    lengths = [5, 9, 3, 12, 12, 1, 7, 10]
    width, comp = 11, max(lengths)
    prompt_ids = torch.full((8, width), pad_id)
    prompt_mask = torch.zeros(8, width, dtype=torch.long)
    completion_ids = torch.full((8, comp), pad_id)
    completion_mask = torch.zeros(8, comp, dtype=torch.long)
    for row, n in enumerate(lengths):
        p = prompts[row // 4]
        prompt_ids[row, width - len(p) :] = p
        prompt_mask[row, width - len(p) :] = 1
        completion_ids[row, :n] = torch.randint(5, 400, (n,), generator=g)
        completion_mask[row, :n] = 1
    tool_mask = completion_mask.clone()
    tool_mask[:, 2:4] = 0  # environment tokens inside the completions: masked from the loss, still attended to
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.randn(8, generator=g),
    }


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def _unshared(trainer):
    """The same trainer computing log-probs with TRL's own (unshared) method."""
    from trl import GRPOTrainer

    return types.MethodType(GRPOTrainer._get_per_token_logps_and_entropies, trainer)


def _full(batch):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return ids, mask, batch["completion_ids"].size(1)


def test_prefix_groups_need_equal_ids_and_mask():
    from trace_rl.training.shared_prefix import prefix_groups

    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [1, 5, 6], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]])
    first, inverse = prefix_groups(ids, mask)
    assert first[inverse].tolist() == [0, 0, 2, 0, 4]  # row 4 has row 0's ids but not its mask


@pytest.mark.parametrize("batch_size", [None, 3])
def test_logps_and_entropies_equal_trls_unshared_path(trainer, batch_size):
    ids, mask, keep = _full(_batch(trainer.processing_class.pad_token_id))
    before = dict(trainer.shared_prefix_stats)
    logps, ent, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, ids, mask, keep, batch_size=batch_size, compute_entropy=True
    )
    ref_logps, ref_ent, _ = _unshared(trainer)(
        trainer.model, ids, mask, keep, batch_size=batch_size, compute_entropy=True
    )
    assert trainer.shared_prefix_stats["shared"] > before["shared"]
    assert logps.shape == ref_logps.shape == (8, keep)
    assert _rel(logps, ref_logps) <= REL_TOL
    assert _rel(ent, ref_ent) <= REL_TOL
    assert logps.abs().sum() > 0 and (logps[mask[:, -keep:] == 0] == 0).all()


def _loss_and_grads(trainer, batch):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    trainer.model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def test_grpo_loss_and_lora_gradients_equal_the_unshared_computation(trainer, monkeypatch):
    batch = _batch(trainer.processing_class.pad_token_id, seed=1)
    ids, mask, keep = _full(batch)
    with torch.no_grad():  # old log-probs a little off the current ones: ratios != 1, some clipped
        logps, _, _ = _unshared(trainer)(trainer.model, ids, mask, keep)
    noise = torch.randn(logps.shape, generator=torch.Generator().manual_seed(2))
    batch["old_per_token_logps"] = logps + 0.1 * noise
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 1, raising=False)  # set by the train loop

    loss, grads = _loss_and_grads(trainer, batch)
    monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", _unshared(trainer))
    ref_loss, ref_grads = _loss_and_grads(trainer, batch)

    assert loss != 0 and abs(float(loss - ref_loss)) <= REL_TOL * abs(float(ref_loss))
    assert grads.keys() == ref_grads.keys() and len(grads) >= 2 * 5 * 2  # A and B of 5 modules in 2 layers
    for name, grad in grads.items():
        assert ref_grads[name].norm() > 0, name
        assert _rel(grad, ref_grads[name]) <= REL_TOL, name
    flat = torch.cat([g.flatten() for g in grads.values()])
    ref_flat = torch.cat([ref_grads[n].flatten() for n in grads])
    assert _rel(flat, ref_flat) <= REL_TOL


def test_batch_with_no_shared_prompt_uses_trls_path_quietly(trainer, caplog):
    batch = _batch(trainer.processing_class.pad_token_id)
    ids, mask, keep = _full(batch)
    rows = [0, 4]  # one row of each group: two distinct prompts
    before = dict(trainer.shared_prefix_stats)
    with caplog.at_level(logging.INFO, logger="trace_rl.training.shared_prefix"):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids[rows], mask[rows], keep)
    assert trainer.shared_prefix_stats["unshared"] == before["unshared"] + 1
    assert trainer.shared_prefix_stats["shared"] == before["shared"]
    assert not caplog.records
    ref, _, _ = _unshared(trainer)(trainer.model, ids[rows], mask[rows], keep)
    assert torch.equal(logps, ref)


def test_gradient_checkpointing_falls_back_with_one_log_line(trainer, caplog):
    ids, mask, keep = _full(_batch(trainer.processing_class.pad_token_id))
    base = trainer.model.get_base_model()
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        with caplog.at_level(logging.INFO, logger="trace_rl.training.shared_prefix"):
            first, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
            trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
    finally:
        base.gradient_checkpointing_disable()
    lines = [r.getMessage() for r in caplog.records if "gradient checkpointing" in r.getMessage()]
    assert len(lines) == 1
    ref, _, _ = _unshared(trainer)(trainer.model, ids, mask, keep)
    assert torch.equal(first, ref)


def test_unshared_reasons():
    from trace_rl.training.shared_prefix import unshared_reason

    model = types.SimpleNamespace(is_gradient_checkpointing=False)
    assert unshared_reason(model, 12, compute_aux_loss=False, extra={"pixel_values": None}) is None
    assert "pixel_values" in unshared_reason(model, 12, compute_aux_loss=False, extra={"pixel_values": torch.ones(1)})
    assert "MoE" in unshared_reason(model, 12, compute_aux_loss=True, extra={})
    assert "fewer than 2" in unshared_reason(model, 1, compute_aux_loss=False, extra={})


def test_a_sliding_window_cache_is_not_shared():
    from transformers import AutoModelForCausalLM, Qwen2Config

    from trace_rl.training.shared_prefix import shared_prefix_logps

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    model = AutoModelForCausalLM.from_config(cfg)
    ids = torch.randint(0, 64, (4, 10))
    ids[2:] = ids[0]
    assert shared_prefix_logps(model, ids, torch.ones_like(ids), 3) is None


def test_trainer_class_switch():
    from trl import GRPOTrainer

    from trace_rl.training.shared_prefix import SharedPrefixGRPOTrainer, trainer_class

    assert trainer_class(False) is GRPOTrainer
    assert trainer_class(True) is SharedPrefixGRPOTrainer and issubclass(SharedPrefixGRPOTrainer, GRPOTrainer)


def test_group_order_keeps_each_prompt_together():
    from trace_rl.training.shared_prefix import group_order, permute_rows

    ids = torch.tensor([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4], [1, 2]])
    orders = []
    for seed in range(6):
        torch.manual_seed(seed)
        order = group_order(ids, torch.ones_like(ids))
        assert sorted(order.tolist()) == list(range(6))
        runs = [ids[i, 0].item() for i in order]
        assert len([k for i, k in enumerate(runs) if i == 0 or runs[i - 1] != k]) == 3  # one run per prompt
        orders.append(tuple(order.tolist()))
    assert len(set(orders)) > 1  # random, not sorted
    batch = permute_rows({"ids": ids, "names": list("abcdef"), "scalar": torch.tensor(2.0), "none": None}, order)
    assert torch.equal(batch["ids"], ids[order]) and batch["names"] == [list("abcdef")[i] for i in order]
    assert batch["scalar"] == 2.0 and batch["none"] is None


def test_grpo_step_with_shared_prefix_trains_the_lora(tiny_dir, tokenizer, tmp_path):
    """A real GRPOTrainer step (2 groups x 4 rollouts from rollout_func, completions of different lengths with
    environment tokens masked; micro-batches of 4 with 2 accumulation steps) through the shared path changes the LoRA
    weights and nothing else, and each micro-batch holds one whole group (TRL's row shuffle would mix the groups in
    68 of 70 splits)."""
    from datasets import Dataset
    from peft import LoraConfig

    from trace_rl.training.shared_prefix import trainer_class

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    words = tokenizer("the book order item total price city", add_special_tokens=False)["input_ids"]

    def rollout(prompts, trainer):
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        completions = [[*words[: 1 + i % len(words)], eos] for i in range(len(prompts))]
        masks = [[1] * len(c) for c in completions]
        for m in masks:
            m[1:2] = [0] * len(m[1:2])
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completions,
            "logprobs": [[0.0] * len(c) for c in completions],
            "env_mask": masks,
        }

    def reward(completion_ids, **kwargs):
        return [float(len(c) % 3) for c in completion_ids]

    opening = "You are a library agent. Look the book up, then answer with its title. " * 3
    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "system", "content": opening}, {"role": "user", "content": f"task {i}"}]}
            for i in range(2)
        ]
    )
    trainer = trainer_class(True)(
        model=str(tiny_dir),
        reward_funcs=[reward],
        args=_args(tmp_path, entropy_coef=0.0, per_device_train_batch_size=4, gradient_accumulation_steps=2),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        rollout_func=rollout,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    changed = {n for n, p in before.items() if not torch.equal(p, after[n].detach())}
    assert changed and all("lora_" in n for n in changed)
    stats = trainer.shared_prefix_stats
    assert stats["shared"] == 2 and stats["unshared"] == 0 and stats["rows"] == 8
    assert stats["prompts"] == 2  # one prompt forwarded per micro-batch
    assert stats["prefix_tokens_skipped"] > 0
