"""Contract tests on what `trace_rl.training.shared_prefix` relies on in TRL 1.16.0 and transformers 5.24.0 (both
pinned): they fail loudly when an upgrade moves the method it overrides or the cache path it reuses.

- `GRPOTrainer._get_per_token_logps_and_entropies` keeps its signature and is what the loss and the old/reference
  log-probs call; it returns (log-probs, entropies, aux loss);
- GRPOTrainer installs TRL's fused LM head with entropies (`model(..., labels=..., fused_lm_head=True)`), whose
  per-token fields are shifted by one (`seq_len - 1`);
- `GRPOTrainer._prepare_inputs` (train branch) is generate -> split pixel values -> row shuffle -> split into
  `steps_per_generation` buffered micro-batches, indexed by `self._step`: the override mirrors it with a group shuffle;
- transformers decoders take the KV cache as `cache`, return it as `.cache`, start positions at the cache's length,
  and `DynamicCache.batch_select_indices` gathers rows; checkpointed layers drop the cache (why the trainer falls
  back under gradient checkpointing).
"""

from __future__ import annotations

import inspect
from importlib.metadata import version

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore")


def test_versions_are_pinned():
    assert version("trl") == "1.16.0"
    assert version("transformers") == "5.24.0"


def test_overridden_method_signature():
    from trl import GRPOTrainer

    params = inspect.signature(GRPOTrainer._get_per_token_logps_and_entropies).parameters
    assert list(params)[:8] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
    ]
    assert params["batch_size"].default is None
    assert params["compute_entropy"].default is False
    assert params["compute_aux_loss"].default is False
    # every other parameter is a multimodal / token-type input defaulting to None (the override falls back on any)
    assert all(p.default is None for name, p in list(params.items())[8:]), list(params)[8:]


def test_loss_and_old_logps_go_through_the_overridden_method():
    from trl import GRPOTrainer

    loss_src = inspect.getsource(GRPOTrainer._compute_loss)
    assert "self._get_per_token_logps_and_entropies(" in loss_src
    assert "compute_entropy=True" in loss_src
    score_src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert score_src.count("self._get_per_token_logps_and_entropies(") >= 2  # old and reference log-probs
    init_src = inspect.getsource(GRPOTrainer.__init__)
    assert 'outputs=("log_probs", "entropy")' in init_src  # the fused head computes entropies too


def test_prepare_inputs_train_branch_is_the_one_mirrored():
    from trl import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._prepare_inputs)
    for line in (
        "generate_every = self.args.steps_per_generation * self.num_iterations",
        "if self._step % generate_every == 0 or self._buffered_inputs is None:",
        "generation_batch = self._generate_and_score_completions(generation_batch)",
        "generation_batch = split_pixel_values_by_grid(generation_batch)",
        "generation_batch = shuffle_sequence_dict(generation_batch)",
        "generation_batches = split_tensor_dict(generation_batch, self.args.steps_per_generation)",
        "self._buffered_inputs = [unsplit_pixel_values_by_grid(batch) for batch in generation_batches]",
        "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]",
    ):
        assert line in src, line
    assert src.count("self._generate_and_score_completions(") == 2  # train and eval branches only


def _tiny_qwen2():
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


def test_fused_head_output_is_shifted_by_one():
    from trl.trainer.utils import add_fused_lm_head

    model = _tiny_qwen2()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, 64, (2, 6))
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids, fused_lm_head=True)
    assert out.log_probs.shape == out.entropy.shape == (2, 5)
    logits = model(input_ids=ids).logits  # without fused_lm_head the original forward runs
    expected = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(out.log_probs, expected, rtol=1e-5, atol=1e-5)


def test_cache_kwarg_positions_and_row_gather():
    from transformers.cache_utils import DynamicCache, DynamicLayer

    model = _tiny_qwen2()
    params = inspect.signature(type(model).forward).parameters
    assert "cache" in params and "logits_to_keep" in params
    assert hasattr(DynamicCache, "batch_select_indices")

    ids = torch.randint(0, 64, (1, 9))
    full = model(input_ids=ids).logits
    prefix = model(input_ids=ids[:, :5], use_cache=True, logits_to_keep=1)
    cache = prefix.cache
    assert isinstance(cache, DynamicCache) and all(type(layer) is DynamicLayer for layer in cache.layers)
    cache.batch_select_indices(torch.tensor([0, 0, 0]))
    tail = model(input_ids=ids[:, 5:].expand(3, -1), attention_mask=torch.ones(3, 9, dtype=torch.long), cache=cache)
    for row in range(3):
        torch.testing.assert_close(tail.logits[row], full[0, 5:], rtol=1e-5, atol=1e-5)


def test_checkpointed_layers_drop_the_cache():
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    assert issubclass(Qwen2DecoderLayer, GradientCheckpointingLayer)
    assert Qwen2DecoderLayer._can_checkpoint_with_cache is False
