"""Shared fixtures for the model-client tests: one tiny model and two LoRA adapters per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trace_rl.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "qwen2")


@pytest.fixture(scope="session")
def tiny_adapters(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from trace_rl.models.tiny import make_lora_adapter

    root = tmp_path_factory.mktemp("adapters")
    return {
        "a": make_lora_adapter(tiny_dir, root / "a", seed=1),
        "b": make_lora_adapter(tiny_dir, root / "b", seed=2),
    }


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)
