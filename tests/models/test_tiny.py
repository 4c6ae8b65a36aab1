"""Tiny models: deterministic per seed, cached, reloadable tokenizer with the right special tokens, LoRA adapters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trace_rl.models.tiny import build_tiny_model, build_tiny_tokenizer, make_lora_adapter, training_corpus


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_tokenizer_reloads_identically_and_has_chat_tokens(tiny_dir: Path, tiny_tokenizer) -> None:
    fresh = build_tiny_tokenizer()
    samples = [*training_corpus()[:50], "héllo wörld <tool_call>{}</tool_call><|im_end|>", "  a\n\n b"]
    assert all(fresh(s)["input_ids"] == tiny_tokenizer(s)["input_ids"] for s in samples)
    assert tiny_tokenizer.padding_side == "left" and tiny_tokenizer.eos_token == "<|im_end|>"
    for token in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer(token)["input_ids"]) == [token]
    assert tiny_tokenizer.decode(tiny_tokenizer("<tool_call>x</tool_call>")["input_ids"], skip_special_tokens=True) == (
        "<tool_call>x</tool_call>"
    )
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert cfg["vocab_size"] == len(tiny_tokenizer) and cfg["eos_token_id"] == tiny_tokenizer.eos_token_id


def test_same_seed_same_weights_and_cache(tiny_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "same")
    ref, new = _weights(tiny_dir), _weights(again)
    assert ref.keys() == new.keys() and all(torch.equal(ref[k], new[k]) for k in ref)
    other = _weights(build_tiny_model(tmp_path / "other", seed=1))
    assert any(not torch.equal(ref[k], other[k]) for k in ref)
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(again) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt


def test_refuses_to_overwrite_a_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        build_tiny_model(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary folder left behind


def test_llama_variant_for_vllm(tmp_path: Path) -> None:
    folder = build_tiny_model(tmp_path / "llama", arch="llama", hidden=128, head_dim=64)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["head_dim"] == 64 and cfg["num_attention_heads"] == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, cfg["vocab_size"])


def test_lora_adapters_are_random_and_seeded(tiny_dir: Path, tiny_adapters: dict[str, Path], tmp_path: Path) -> None:
    cfg = json.loads((tiny_adapters["a"] / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and set(cfg["target_modules"]) >= {"q_proj", "v_proj"}
    a = load_file(str(tiny_adapters["a"] / "adapter_model.safetensors"))
    b = load_file(str(tiny_adapters["b"] / "adapter_model.safetensors"))
    lora_b = [k for k in a if "lora_B" in k]
    assert lora_b and all(a[k].abs().sum() > 0 for k in lora_b)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    same = load_file(str(make_lora_adapter(tiny_dir, tmp_path / "a2", seed=1) / "adapter_model.safetensors"))
    assert all(torch.equal(a[k], same[k]) for k in a)
    noop = load_file(
        str(make_lora_adapter(tiny_dir, tmp_path / "noop", init_lora_weights=True) / "adapter_model.safetensors")
    )
    assert all(noop[k].abs().sum() == 0 for k in noop if "lora_B" in k)
